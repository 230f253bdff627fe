# ruff: noqa: E501  (the cases are kept one per line, as in Kubernetes' table)
"""Device selectors evaluated as Kubernetes evaluates them: Kubernetes' own cases
(``k8s.io/dynamic-resource-allocation/cel/compile_test.go``, the scalar attributes of v1),
examples from its Quantity and semver libraries' documentation, and error cases whose
outcome follows from its ``compile.go``: a domain nobody published is an empty map, a
missing attribute is a runtime error, a non-bool result an error.

Expected: True/False, or ("compile"|"runtime", a substring of our message where it is ours).
"""

from __future__ import annotations

import time

import pytest

from scheduler.codecs.cel import Selectors
from scheduler.model.devices import Attribute, Device, SelectorError


def B(v: bool) -> tuple[str, bool]:
    return ("bool", v)


def I(v: int) -> tuple[str, int]:  # noqa: E743
    return ("int", v)


def S(v: str) -> tuple[str, str]:
    return ("string", v)


def V(v: str) -> tuple[str, str]:
    return ("version", v)


D = "dra.example.com"
GPU = {
    "driver": "gpu.example.com",
    "attributes": {
        "model": S("A100"),
        "vendor": S("nvidia"),
        "driverVersion": V("1.2.0"),
        "cores": I(108),
        "mig": B(True),
        "gpu.example.com/family": S("ampere"),
    },
    "capacity": {"memory": "80Gi", "gpu.example.com/slices": "7"},
}
CASES = [
    ("k8s:true", "true", {}, True),
    ("k8s:false", "false", {}, False),
    ("k8s:syntax-error", "?!", {}, ("compile", "")),
    ("k8s:type-error", "1", {}, ("compile", "bool")),
    (
        "k8s:runtime-error-lookup-identifier",
        'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
        {},
        ("runtime", "no such key"),
    ),
    (
        "k8s:runtime-error-lookup-map",
        'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))',
        {},
        ("runtime", "no such key"),
    ),
    ("k8s:domain-check-negative", '"no-such-domain" in device.attributes', {}, False),
    (
        "k8s:domain-check-positive",
        '"dra.example.com" in device.attributes',
        {"attributes": {D + "/something": B(True)}},
        True,
    ),
    ("k8s:empty-driver-name", 'device.driver == ""', {}, True),
    ("k8s:real-driver-name", 'device.driver == "dra.example.com"', {"driver": D}, True),
    (
        "k8s:driver-name-qualifier",
        'device.attributes["dra.example.com"].name',
        {"driver": D, "attributes": {"name": B(True)}},
        True,
    ),
    (
        "k8s:driver-name-qualifier-map-lookup",
        'device.attributes["dra.example.com"]["name"]',
        {"driver": D, "attributes": {"name": B(True)}},
        True,
    ),
    (
        "k8s:bind",
        'cel.bind(dra, device.attributes["dra.example.com"], dra.name)',
        {"driver": D, "attributes": {"name": B(True)}},
        True,
    ),
    (
        "k8s:qualified-attribute-name",
        'device.attributes["other.example.com"].name',
        {"driver": D, "attributes": {"other.example.com/name": B(True)}},
        True,
    ),
    (
        "k8s:int",
        'device.attributes["dra.example.com"].name > 0',
        {"driver": D, "attributes": {"name": I(1)}},
        True,
    ),
    (
        "k8s:string",
        'device.attributes["dra.example.com"].name == "fish"',
        {"driver": D, "attributes": {"name": S("fish")}},
        True,
    ),
    (
        "k8s:macro-exists-on-int",
        'device.attributes["dra.example.com"].name.exists(x, x > 0)',
        {"driver": D, "attributes": {"name": I(1)}},
        ("runtime", ""),
    ),
    (
        "k8s:version",
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("0.0.1"))',
        {"driver": D, "attributes": {"name": V("1.0.0")}},
        True,
    ),
    (
        "k8s:version_v",
        'device.attributes["dra.example.com"].name.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)',
        {"driver": D, "attributes": {"name": V("1.0.0")}},
        True,
    ),
    (
        "k8s:quantity",
        'device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        {"driver": D, "capacity": {"name": "1Mi"}},
        True,
    ),
    (
        "k8s:check-positive",
        '"name" in device.capacity["dra.example.com"] && device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        {"driver": D, "capacity": {"name": "1Mi"}},
        True,
    ),
    (
        "k8s:check-negative",
        '!("name" in device.capacity["dra.example.com"]) || device.capacity["dra.example.com"].name.isGreaterThan(quantity("1Ki"))',
        {},
        True,
    ),
    (
        "k8s:all",
        """device.capacity["dra.example.com"].quantity.isGreaterThan(quantity("1Ki")) &&
device.attributes["dra.example.com"].bool && device.attributes["dra.example.com"].int > 0 &&
device.attributes["dra.example.com"].string == "fish" && device.attributes["dra.example.com"].version.isGreaterThan(semver("0.0.1")) &&
device.capacity["dra.example.com"]["quantity"].isGreaterThan(quantity("1Ki")) && device.attributes["dra.example.com"]["bool"] &&
device.attributes["dra.example.com"]["int"] > 0 && device.attributes["dra.example.com"]["string"] == "fish" &&
device.attributes["dra.example.com"]["version"].isGreaterThan(semver("0.0.1"))""",
        {
            "driver": D,
            "attributes": {
                "bool": B(True),
                "int": I(1),
                "string": S("fish"),
                "version": V("1.0.0"),
            },
            "capacity": {"quantity": "1Mi"},
        },
        True,
    ),
    (
        "k8s:many",
        'device.attributes["dra.example.com"].a && device.attributes["dra.example.com"].b && device.attributes["dra.example.com"].c',
        {"driver": D, "attributes": {"a": B(True), "b": B(True), "c": B(True)}},
        True,
    ),
    (
        "k8s:check_attribute_domains",
        'device.attributes.exists_one(x, x == "dra.example.com")',
        {"driver": D, "attributes": {"services": S("some_example_value")}},
        True,
    ),
    (
        "k8s:check_attribute_ids",
        'device.attributes["dra.example.com"].exists_one(x, x == "services")',
        {"driver": D, "attributes": {"services": S("some_example_value")}},
        True,
    ),
    (
        "k8s:split_attribute",
        'device.attributes["dra.example.com"].services.split("example").size() >= 2',
        {"driver": D, "attributes": {"services": S("some_example_value")}},
        True,
    ),
    (
        "k8s:regexp_attribute",
        'device.attributes["dra.example.com"].services.matches("[^a]?sym")',
        {"driver": D, "attributes": {"services": S("asymetric")}},
        True,
    ),
    (
        "k8s:check_capacity_domains",
        'device.capacity.exists_one(x, x == "dra.example.com")',
        {"driver": D, "capacity": {"memory": "1Mi"}},
        True,
    ),
    (
        "k8s:check_capacity_ids",
        'device.capacity["dra.example.com"].exists_one(x, x == "memory")',
        {"driver": D, "capacity": {"memory": "1Mi"}},
        True,
    ),
    (
        "k8s:allow_multiple_allocations",
        "device.allowMultipleAllocations == true",
        {"driver": D, "allowMultipleAllocations": True},
        True,
    ),
    (
        "k8s:allow_multiple_allocations_default",
        "device.allowMultipleAllocations == false",
        {"driver": D},
        True,
    ),
    # --- docs examples ---
    (
        "doc:dra-typical",
        'device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "A100" && device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0',
        GPU,
        True,
    ),
    (
        "doc:dra-semver",
        'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.0.0"))',
        GPU,
        True,
    ),
    (
        "doc:quantity-compare",
        'quantity("200M").compareTo(quantity("0.2G")) == 0 && quantity("50M").compareTo(quantity("50Mi")) == -1 && quantity("150Mi").isGreaterThan(quantity("100Mi")) && quantity("50M").isLessThan(quantity("100M"))',
        {},
        True,
    ),
    (
        "doc:quantity-arith",
        'quantity("50k").add(20).sub(quantity("100k")).sub(-50000) == quantity("20") && quantity("50k").sub(20000).asApproximateFloat() == 30000.0',
        {},
        True,
    ),
    (
        "doc:quantity-int",
        'quantity("50k").asInteger() == 50000 && quantity("50000000G").isInteger() && !quantity("9999999999999999999999999999999999999G").isInteger()',
        {},
        True,
    ),
    (
        "doc:quantity-asInteger-overflow",
        'quantity("9999999999999999999999999999999999999G").asInteger() > 0',
        {},
        ("runtime", ""),
    ),
    ("doc:isQuantity", 'isQuantity("1.3Gi") && !isQuantity("200K") && !isQuantity("Mi")', {}, True),
    ("doc:quantity-invalid", 'quantity("200K").isInteger()', {}, ("runtime", "")),
    ("doc:quantity-equal", 'quantity("1k") == quantity("1000")', {}, True),
    (
        "doc:semver-parts",
        'semver("1.2.3").major() == 1 && semver("1.2.3").minor() == 2 && semver("1.2.3").patch() == 3 && semver("1.2.3").compareTo(semver("2.0.0")) == -1',
        {},
        True,
    ),
    (
        "doc:semver-prerelease",
        'semver("1.0.0-alpha").isLessThan(semver("1.0.0")) && !isSemver("v1.0") && isSemver("v1.0", true)',
        {},
        True,
    ),
    (
        "doc:strings",
        'device.attributes["gpu.example.com"].model.lowerAscii().startsWith("a1") && device.attributes["gpu.example.com"].vendor.endsWith("dia") && device.attributes["gpu.example.com"].family.matches("^amp") && size(device.attributes["gpu.example.com"].model) == 4',
        GPU,
        True,
    ),
    (
        "doc:has",
        'has(device.attributes["gpu.example.com"].model) && !has(device.attributes["gpu.example.com"].nope)',
        GPU,
        True,
    ),
    # --- own: error semantics ---
    (
        "own:missing-attr",
        'device.attributes["gpu.example.com"].nope == "x"',
        GPU,
        ("runtime", "no such key"),
    ),
    ("own:non-bool-result", 'device.attributes["gpu.example.com"].cores', GPU, ("runtime", "bool")),
    (
        "own:type-mismatch-ordering",
        'device.attributes["gpu.example.com"].model > 0',
        GPU,
        ("runtime", "overload"),
    ),
    ("own:heterogeneous-equality", 'device.attributes["gpu.example.com"].model == 1', GPU, False),
    (
        "own:semver-vs-quantity",
        'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(quantity("1"))',
        GPU,
        ("runtime", "overload"),
    ),
    (
        "own:quantity-static-type-error",
        'device.capacity["gpu.example.com"].memory > 0',
        GPU,
        ("compile", "overload"),
    ),
    ("own:undeclared-var", "foo == 1", GPU, ("compile", "undeclared")),
]


SELECTORS = Selectors()


def device_of(spec: dict) -> tuple[str, Device]:
    attributes = {
        name: Attribute(kind, value) for name, (kind, value) in spec.get("attributes", {}).items()
    }
    return spec.get("driver", ""), Device(
        "d",
        attributes=attributes,
        capacity=spec.get("capacity", {}),
        allow_multiple_allocations=spec.get("allowMultipleAllocations", False),
    )


@pytest.mark.parametrize(
    ("name", "expression", "device", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_a_selector_evaluates_as_kubernetes_says(
    name: str, expression: str, device: dict, expected: object
) -> None:
    driver, dev = device_of(device)
    if isinstance(expected, bool):
        assert SELECTORS.evaluate(expression, driver, dev) is expected
        return
    phase, _ = expected
    with pytest.raises(SelectorError) as raised:
        SELECTORS.evaluate(expression, driver, dev)
    assert str(raised.value).startswith(f"CEL {phase} error"), raised.value


def test_a_selector_that_loops_too_long_is_stopped_not_run_for_ever() -> None:
    ten = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
    deep = f"{ten}.all(a, {ten}.all(b, {ten}.all(c, {ten}.all(d, {ten}.all(e, a + b + c + d + e > 0)))))"
    started = time.monotonic()
    with pytest.raises(SelectorError, match="CEL runtime error"):
        SELECTORS.evaluate(deep, "", Device("d"))
    assert time.monotonic() - started < 5


def test_a_compile_error_is_kept_and_said_again_without_compiling_again() -> None:
    selectors = Selectors()
    for _ in range(2):
        with pytest.raises(SelectorError, match="CEL compile error"):
            selectors.evaluate("device.driver ==", "x", Device("d"))
    assert len(selectors._compiled) == 1


def test_a_hostile_expression_length_is_refused() -> None:
    with pytest.raises(SelectorError, match="longer than"):
        Selectors().evaluate("true && " * 2000 + "true", "", Device("d"))
