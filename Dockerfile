# The scheduler image: slim Python, the package installed from this repository, non-root.
FROM python:3.11-slim
RUN useradd --create-home --uid 10001 scheduler
WORKDIR /src
COPY pyproject.toml README.md ./
COPY scheduler ./scheduler
RUN pip install --no-cache-dir . && rm -rf /src
WORKDIR /home/scheduler
USER 10001
ENTRYPOINT ["gang-scheduler"]
CMD ["run", "--log-format=json"]
