"""The ``gang-scheduler`` command line: flags become settings, settings start the operator."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import math
import os
import platform
import socket
import sys
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any


def _import_structlog() -> ModuleType:
    """structlog, without rich. structlog's console renderer imports rich, when installed,
    only to draw tracebacks in colour: with pygments, about a tenth of a second of every
    start, before the first LIST can go. Our tracebacks are plain text either way
    (``format_exc_info``), and rich comes only with a development install (import-linter
    brings it). Hidden while structlog loads, as kopf's unused clients are."""
    hidden = "rich" not in sys.modules
    if hidden:
        sys.modules["rich"] = None  # type: ignore[assignment]
    try:
        import structlog  # noqa: PLC0415

        return structlog
    finally:
        if hidden:
            del sys.modules["rich"]


structlog = _import_structlog()

from scheduler import __version__  # noqa: E402
from scheduler.model.config import Config  # noqa: E402
from scheduler.sim.commands import add_commands as add_sim_commands  # noqa: E402

if TYPE_CHECKING:
    from scheduler.shell.api import Credentials


def build_parser(prog: str = "gang-scheduler") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "A Kubernetes scheduler for jobs whose pods must start together: "
            "a gang binds whole, or none of it holds resources."
        ),
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    commands.add_parser("version", help="print the version and exit")
    why = commands.add_parser(
        "explain", help="say why a gang is (not) placed, computed on the cluster as it is now"
    )
    why.add_argument(
        "gang",
        metavar="NAMESPACE/NAME",
        nargs="?",
        help="the gang (a PodGroup or annotation name, or a gang from an owner such as "
        "ml/JobSet/llama/workers-0), or one of its pods",
    )
    why.add_argument(
        "--cluster",
        action="store_true",
        help="say how fragmented the free room is: what is stranded on nodes that cannot "
        "take even the smallest waiting member, how many of it fit, whole GPU nodes free",
    )
    why.add_argument(
        "--forecast",
        action="store_true",
        help="say when the gang is expected to start: the passes to come played forward, "
        "each run ending after its expected duration (gang-scheduler.io/expected-duration, "
        "else how long gangs like it ran); at most 300 virtual passes",
    )
    _looking_flags(why)
    top = commands.add_parser(
        "top",
        help="list the gangs with members waiting: queue, members waiting of the minimum, "
        "how long, and why (what a pass on the cluster as it is now says)",
    )
    top.add_argument(
        "--forecast",
        action="store_true",
        help="add an ETA column: when each gang is expected to start, as explain --forecast "
        "says it",
    )
    _looking_flags(top)
    run = commands.add_parser("run", help="schedule the pods whose spec.schedulerName names us")
    defaults = Config()
    run.add_argument(
        "--kubeconfig",
        help="kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or in-cluster)",
    )
    run.add_argument(
        "--scheduler-name",
        action="append",
        type=_scheduler_name,
        metavar="NAME",
        help="schedule pods whose spec.schedulerName is this; may be given more than once "
        "(e.g. also scheduler-plugins-scheduler or volcano, for operators that hard-code "
        "those): the first is the scheduler's identity (its Lease and its Events' component "
        f"for pods that ask for it) (default: {defaults.scheduler_name})",
    )
    run.add_argument(
        "--default-timeout",
        type=float,
        default=defaults.default_timeout_seconds,
        metavar="SECONDS",
        help="how long a gang may wait from its first attempt when it does not say "
        "(default: %(default)s)",
    )
    run.add_argument(
        "--max-backoff",
        type=float,
        default=defaults.max_backoff_seconds,
        metavar="SECONDS",
        help="longest wait between attempts of a gang that did not fit (default: %(default)s)",
    )
    run.add_argument(
        "--stale-gang-after",
        type=_seconds,
        default=defaults.stale_gang_seconds,
        metavar="SECONDS",
        help="a running gang with fewer running members than its minimum for this long has "
        "the rest evicted, so that its room goes to gangs that can run; a gang may say "
        "otherwise with gang-scheduler.io/stale-after (default: never)",
    )
    run.add_argument(
        "--forecast-interval",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="every that many seconds while gangs wait, play the passes to come forward in a "
        "worker thread and write each waiting gang's expected start on its PodGroup "
        "(condition EstimatedStart; gang-scheduler.io/EstimatedStart on upstream and Volcano "
        "PodGroups); the play's own time stretches the interval "
        "(default: 0, never)",
    )
    run.add_argument(
        "--reservations",
        type=_positive_int,
        default=defaults.reservations,
        metavar="COUNT",
        help="with the reserve action: how many gangs left unplaced, first in queue order, "
        "have the room the forward play started them on held for them; a gang backfills "
        "onto reserved room only if it is expected to end before the earliest of them "
        "starts (default: %(default)s)",
    )
    run.add_argument(
        "--fair-share-half-life",
        type=_seconds,
        default=defaults.fair_share_half_life_seconds,
        metavar="SECONDS",
        help="time-based fair share: a queue's recent usage, an average that halves every "
        "SECONDS, counts beside what it holds now when the next gang is chosen, so a queue "
        "that had the cluster lately yields to one that had little (default: off)",
    )
    run.add_argument(
        "--starvation-after",
        type=float,
        default=defaults.starvation_seconds,
        metavar="SECONDS",
        help="a gang that has waited this long from its first attempt has the room it "
        "needs held for it as it frees, node by node; smaller gangs keep using the rest "
        "(default: %(default)s)",
    )
    run.add_argument(
        "--actions",
        type=_actions,
        default=defaults.actions,
        metavar="NAME,...",
        help="the actions of a scheduling pass, in order; leave one out to turn it off, "
        "e.g. without reclaim (hold-head holds room for a gang that waited past "
        "--starvation-after, evict-stale evicts gangs running below their minimum; both "
        f"act in allocate's turns) (default: {','.join(defaults.actions)})",
    )
    run.add_argument(
        "--consolidation-max-moves",
        type=int,
        default=defaults.max_moves_per_pass,
        metavar="N",
        help="consolidation (the consolidate action, off unless --actions names it) moves "
        "at most N pods in one pass (default: %(default)s)",
    )
    run.add_argument(
        "--consolidation-below-priority",
        type=int,
        default=defaults.movable_below_priority,
        metavar="PRIORITY",
        help="consolidation moves only pods annotated gang-scheduler.io/movable=true, owned "
        "by a controller, whose priority is below PRIORITY (default: %(default)s)",
    )
    run.add_argument(
        "--bind-volumes",
        action=argparse.BooleanOptionalAction,
        default=defaults.bind_volumes,
        help="bind or provision the volumes of claims that wait for their first consumer "
        "(a WaitForFirstConsumer StorageClass) on the nodes their pods are placed on, as "
        "kube-scheduler does, a gang's all before any of its pods is bound; off, such pods "
        "wait (default: %(default)s)",
    )
    run.add_argument(
        "--volume-bind-timeout",
        type=float,
        default=defaults.volume_bind_timeout_seconds,
        metavar="SECONDS",
        help="how long a gang's claims may take to be bound (their volumes made) before its "
        "pods are bound; past it, nothing of the gang is bound and it is tried again "
        "(kube-scheduler's bindTimeoutSeconds) (default: %(default)s)",
    )
    run.add_argument(
        "--bind-concurrency",
        type=int,
        default=32,
        help="binding requests in flight at once (default: %(default)s)",
    )
    run.add_argument(
        "--kube-api-qps",
        type=float,
        default=0.0,
        help="requests a second to the API server, on average, as client-go's rate limit "
        "(kube-scheduler's clientConnection.qps); 0: no limit (default: %(default)s)",
    )
    run.add_argument(
        "--kube-api-burst",
        type=int,
        default=0,
        help="requests at once above --kube-api-qps (clientConnection.burst); "
        "default: as many as --kube-api-qps",
    )
    run.add_argument(
        "--log-format",
        choices=["console", "json"],
        default="json" if os.environ.get("KUBERNETES_SERVICE_HOST") else "console",
        help="json in a cluster, console elsewhere (default: %(default)s)",
    )
    run.add_argument(
        "--health-port",
        type=int,
        help="serve a liveness endpoint on http://0.0.0.0:PORT/healthz (default: none)",
    )
    run.add_argument(
        "--unreachable-limit",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="/healthz fails once every call to the API server has failed for this long, "
        "so that Kubernetes restarts the pod (default: %(default)s)",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on http://0.0.0.0:PORT/metrics (default: none)",
    )
    run.add_argument(
        "--leader-elect",
        action="store_true",
        help="run as one of several replicas: only the holder of a Lease schedules",
    )
    run.add_argument(
        "--leader-elect-namespace",
        default="gang-scheduler-system",
        help="namespace of the Lease, named after --scheduler-name (default: %(default)s)",
    )
    run.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="a standby takes over this long after the leader's last renewal "
        "(default: %(default)s)",
    )
    _topology_flags(run)
    run.add_argument("--verbose", "-v", action="store_true", help="log every pass")
    add_sim_commands(commands)  # snapshot, forecast, simulate, trace
    return parser


def _looking_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of the commands that look at the cluster (explain, top)."""
    parser.add_argument(
        "--kubeconfig", help="kubeconfig to use (default: $KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument(
        "--scheduler-name",
        action="append",
        type=_scheduler_name,
        metavar="NAME",
        help=f"as for run; may be given more than once (default: {Config().scheduler_name})",
    )
    parser.add_argument(
        "--actions",
        type=_actions,
        default=Config().actions,
        metavar="NAME,...",
        help="as for run: the actions of the pass computed here, e.g. with consolidate to "
        f"see what it would move (default: {','.join(Config().actions)})",
    )
    _topology_flags(parser)


def _topology_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--topology-namespace",
        default="gang-scheduler-system",
        help="where the ConfigMap labelled sakkara.topology lives (default: %(default)s)",
    )
    parser.add_argument(
        "--topology-from-labels",
        type=_label_levels,
        default=(),
        metavar="LEVEL=LABEL,...",
        help="without a topology ConfigMap, build the tree from node labels, e.g. "
        "rack=topology.example.com/rack,zone=topology.kubernetes.io/zone",
    )
    parser.add_argument(
        "--scoring",
        choices=("pack", "spread"),
        default=Config().scoring,
        help="among the nodes that fit: pack (most allocated first: fewer fragmented nodes, "
        "room kept whole for big gangs) or spread (least allocated first); a gang's pods "
        "may say otherwise with the annotation gang-scheduler.io/scoring (default: "
        "%(default)s)",
    )


def _label_levels(raw: str) -> tuple[tuple[str, str], ...]:
    levels: list[tuple[str, str]] = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        level, sep, key = item.partition("=")
        if not sep or not level or not key:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not LEVEL=LABEL; e.g. rack=topology.example.com/rack"
            )
        if level == "node" or level in (name for name, _ in levels):
            raise argparse.ArgumentTypeError(f"level {level!r} is reserved or given twice")
        levels.append((level, key))
    return tuple(levels)


def configure_logging(*, fmt: str, verbose: bool) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    renderer = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)


def _scheduler_name(text: str) -> str:
    name = text.strip()
    if not name or any(c.isspace() for c in name):
        raise argparse.ArgumentTypeError(
            f"a scheduler name is a non-empty word such as gang-scheduler, got {text!r}"
        )
    return name


def _actions(text: str) -> tuple[str, ...]:
    """--actions: names of registered actions, comma-separated, each once."""
    from scheduler.core.actions import UnknownActions, actions_named  # noqa: PLC0415

    names = tuple(name.strip() for name in text.split(",") if name.strip())
    try:
        actions_named(names)
    except UnknownActions as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return names


def _seconds(text: str) -> float:
    """A number of seconds, 0 or more (a negative grace would evict at once)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"a number of seconds, 0 or more, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    """A whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a whole number, 1 or more, got {text!r}")
    return value


def _names(given: list[str] | None) -> dict[str, Any]:
    """--scheduler-name, given once or more: the first is the identity, the others aliases
    (a name given twice counts once)."""
    names = list(dict.fromkeys(given or [Config().scheduler_name]))
    return {"scheduler_name": names[0], "aliases": tuple(names[1:])}


async def _run(args: argparse.Namespace) -> None:
    # Imported here: `version` and `--help` stay fast and need no cluster libraries.
    from scheduler.operator import run_operator  # noqa: PLC0415
    from scheduler.shell.api import load_credentials  # noqa: PLC0415

    # The cache holds long-lived objects (every pod and node); a full collection walks them
    # all and stalls the event loop mid-bind. Freezing what startup made and collecting the
    # youngest generation less often cut p99 bind latency by a third in `make bench`.
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    gc.enable()  # main() turned it off while the modules loaded
    # SIGINT and SIGTERM set run_operator's stop flag: it stops the watches, then drains.
    config = Config(
        **_names(args.scheduler_name),
        default_timeout_seconds=args.default_timeout,
        max_backoff_seconds=args.max_backoff,
        starvation_seconds=args.starvation_after,
        reservations=args.reservations,
        stale_gang_seconds=args.stale_gang_after,
        fair_share_half_life_seconds=args.fair_share_half_life,
        topology_labels=args.topology_from_labels,
        scoring=args.scoring,
        actions=args.actions,
        max_moves_per_pass=args.consolidation_max_moves,
        movable_below_priority=args.consolidation_below_priority,
        bind_volumes=args.bind_volumes,
        volume_bind_timeout_seconds=args.volume_bind_timeout,
    )
    structlog.get_logger().info(
        "starting",
        version=__version__,
        scheduler_name=config.scheduler_name,
        aliases=list(config.aliases),
        actions=list(config.actions),
    )
    await run_operator(
        credentials=load_credentials(args.kubeconfig),
        config=config,
        bind_concurrency=args.bind_concurrency,
        liveness_endpoint=(
            f"http://0.0.0.0:{args.health_port}/healthz" if args.health_port else None
        ),
        metrics_port=args.metrics_port,
        unreachable_limit=args.unreachable_limit,
        api_rate_limit=(
            (args.kube_api_qps, args.kube_api_burst or max(int(args.kube_api_qps), 1))
            if args.kube_api_qps > 0
            else None
        ),
        topology_namespace=args.topology_namespace,
        forecast_interval=args.forecast_interval,
        leader_election=(
            (
                args.leader_elect_namespace,
                f"{socket.gethostname()}_{os.getpid()}",
                args.lease_duration,
            )
            if args.leader_elect
            else None
        ),
    )


def _explain(args: argparse.Namespace) -> int:
    from scheduler.model.pods import GangKey  # noqa: PLC0415
    from scheduler.shell.explaining import explain_gang  # noqa: PLC0415

    # A namespace has no "/"; a gang from an owner has ("JobSet/llama/workers-0").
    namespace, _, name = (args.gang or "").partition("/")
    if args.cluster and args.gang is None:
        namespace, name = "", ""  # the cluster alone
    elif not namespace or not name:
        print(
            f"error: give the gang as NAMESPACE/NAME (or --cluster), got {args.gang!r}",
            file=sys.stderr,
        )
        return 2
    return _look(
        lambda credentials: explain_gang(
            credentials,
            GangKey(namespace, name) if name else None,
            config=_looking_config(args),
            topology_namespace=args.topology_namespace,
            cluster=args.cluster,
            eta=args.forecast,
        ),
        kubeconfig=args.kubeconfig,
    )


def _top(args: argparse.Namespace) -> int:
    from scheduler.shell.explaining import top  # noqa: PLC0415

    return _look(
        lambda credentials: top(
            credentials,
            config=_looking_config(args),
            topology_namespace=args.topology_namespace,
            forecasting=args.forecast,
        ),
        kubeconfig=args.kubeconfig,
    )


def _look(looking: Callable[[Credentials], Awaitable[list[str]]], *, kubeconfig: str | None) -> int:
    """Run a command that looks at the cluster (explain, top) and print what it says; exit 2
    with one line when the cluster cannot be read."""
    from scheduler.shell.api import load_credentials  # noqa: PLC0415

    try:
        lines = asyncio.run(looking(load_credentials(kubeconfig)))
    except Exception as error:  # no kubeconfig, the API server away or refusing: said
        print(f"error: could not read the cluster: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def _looking_config(args: argparse.Namespace) -> Config:
    """The settings of explain and top (``_looking_flags``)."""
    return Config(
        **_names(args.scheduler_name),
        topology_labels=args.topology_from_labels,
        scoring=args.scoring,
        actions=args.actions,
    )


def kubectl_main() -> int:
    """``kubectl gang ...``: the same commands as a kubectl plugin (kubectl runs the
    executable ``kubectl-gang`` on the PATH with the words after ``gang``)."""
    return main(prog="kubectl gang")


def main(argv: list[str] | None = None, *, prog: str = "gang-scheduler") -> int:
    args = build_parser(prog).parse_args(argv)
    if args.command == "version":
        print(f"gang-scheduler {__version__} (Python {platform.python_version()})")
        return 0
    if args.command == "explain":
        return _explain(args)
    if args.command == "top":
        return _top(args)
    if args.command in ("snapshot", "forecast", "simulate", "trace"):
        from scheduler.sim.commands import main as sim_main  # noqa: PLC0415

        return sim_main(args)
    if args.command == "run" and "reserve" in args.actions and not args.forecast_interval:
        print(
            "error: --actions names reserve, whose reservations come from the forward play: "
            "give --forecast-interval too (30, say)",
            file=sys.stderr,
        )
        return 2
    if args.command == "run":
        # No collections while the modules load (until _run freezes what they made): what
        # an import makes is not garbage, and at the default thresholds the collector ran
        # about ninety times before the first LIST could go.
        gc.disable()
        configure_logging(fmt=args.log_format, verbose=args.verbose)
        from scheduler.shell.electing import LostLeadership  # noqa: PLC0415
        from scheduler.shell.health import Unhealthy  # noqa: PLC0415

        try:
            asyncio.run(_run(args))
        except LostLeadership as lost:
            structlog.get_logger().error(
                "lost leadership; exiting so a standby takes over", reason=str(lost)
            )
            return 1
        except Unhealthy as unhealthy:
            structlog.get_logger().error("exiting to be restarted", reason=str(unhealthy))
            return 1
        return 0
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse rejects unknown ones


if __name__ == "__main__":
    sys.exit(main())
