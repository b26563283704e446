"""api/openapi.yaml against itself, the contract and the live server.

(a) the document is structurally valid OpenAPI 3.0 (every path has operations, every $ref
    resolves, path parameters are declared, errors use the Error schema with the contract's
    status per code) and covers the contract's surface;
(b) every operation not marked `x-warren-status: planned` is routed by the live server, its
    documented example request succeeds and the answer matches the documented schema (no
    undocumented fields); every planned operation, property and enum value answers what its
    `x-warren-today` says;
(c) the server rejects an unknown field at every place a request body schema declares
    `additionalProperties: false`.

Needs PyYAML (Debian: python3-yaml).
"""

from __future__ import annotations

import copy
import io
import json
import re
import tarfile
import urllib.parse
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import yaml

import e2e_util as u

REPO = Path(__file__).resolve().parents[2]
SPEC_FILE = REPO / "api" / "openapi.yaml"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
UNKNOWN = "x_openapi_unknown_field"
# Operations on an exec that must still run (the others take a finished one).
RUNNING_EXEC_OPS = ("signalExec", "writeExecInput", "resizeExec")
# Operations on a desktop sandbox's screen.
DESKTOP_OPS = ("screenshot", "sendInput")

# The contract's HTTP surface (CONTRACT.md): method and path template.
CONTRACT_ROUTES = [
    ("get", "/healthz"),
    ("post", "/v1/sandboxes"),
    ("post", "/v1/sandboxes:batch"),
    ("get", "/v1/sandboxes"),
    ("get", "/v1/sandboxes/{id}"),
    ("delete", "/v1/sandboxes/{id}"),
    ("post", "/v1/sandboxes/{id}/pause"),
    ("post", "/v1/sandboxes/{id}/resume"),
    ("put", "/v1/sandboxes/{id}/network"),
    ("post", "/v1/sandboxes/{id}/exec"),
    ("get", "/v1/sandboxes/{id}/execs/{exec_id}"),
    ("get", "/v1/sandboxes/{id}/execs/{exec_id}/stream"),
    ("post", "/v1/sandboxes/{id}/execs/{exec_id}/signal"),
    ("put", "/v1/sandboxes/{id}/files"),
    ("get", "/v1/sandboxes/{id}/files"),
    ("put", "/v1/sandboxes/{id}/archive"),
    ("get", "/v1/sandboxes/{id}/archive"),
    ("post", "/v1/calls"),
    ("post", "/v1/calls:batch"),
    ("get", "/v1/layers"),
    ("post", "/v1/layers"),
    ("delete", "/v1/layers/{name}:{tag}"),
    # Issue 26: an image's format and what nodes fetched of a chunked one (x-warren-addition).
    ("get", "/v1/layers/{name}:{tag}"),
    ("get", "/v1/trajectories/{id}"),
    ("post", "/v1/leases"),
    ("post", "/v1/leases/{id}/renew"),
    ("delete", "/v1/leases/{id}"),
    ("get", "/v1/nodes"),
    ("get", "/metrics"),
    # Additions: the CLI's `warren token create|ls|rm` needs an API (CONTRACT.md names the
    # CLI commands but no routes for them).
    ("post", "/v1/tokens"),
    ("get", "/v1/tokens"),
    ("delete", "/v1/tokens/{name}"),
    # Additions for integrity (issue 23): a filesystem policy changed while the sandbox runs,
    # as the network policy is, and the tamper report a grader reads before trusting a run.
    ("put", "/v1/sandboxes/{id}/filesystem"),
    ("get", "/v1/sandboxes/{id}/changes"),
    # The contract's snapshot and fork (issue 30).
    ("post", "/v1/sandboxes/{id}/snapshot"),
    ("post", "/v1/sandboxes/{id}/fork"),
    # Additions for the cluster (issue 25): `warren node cordon|uncordon|drain NAME` needs an
    # API; `warren serve` answers invalid (x-warren-status: cluster).
    ("post", "/v1/nodes/{name}/cordon"),
    ("post", "/v1/nodes/{name}/uncordon"),
    ("post", "/v1/nodes/{name}/drain"),
    # Additions for terminals (issue 29): the contract's exec `{"tty": true, "rows", "cols"}`
    # needs a way to type into the terminal and to resize it while the command runs.
    ("post", "/v1/sandboxes/{id}/execs/{exec_id}/input"),
    ("post", "/v1/sandboxes/{id}/execs/{exec_id}/resize"),
    # Desktops (issue 29): the contract's screen and input.
    ("get", "/v1/sandboxes/{id}/screen"),
    ("post", "/v1/sandboxes/{id}/input"),
    # The dashboard (issue 32): a sandbox's exec history, and the last hour of the API
    # server's figures with the calls' verdicts and the nodes' runners.
    ("get", "/v1/sandboxes/{id}/execs"),
    ("get", "/v1/stats"),
]

# The contract's schemas and their fields; fields beyond these must be marked x-warren-addition.
CONTRACT_FIELDS = {
    "SandboxSpec": ["backend", "image", "workspace", "tools", "cpu", "memory_mb", "disk_mb", "pids",
                    "network", "env", "ttl_s", "idle_timeout_s", "labels", "trajectory", "lease",
                    "on_lease_expiry", "display"],
    "Sandbox": ["backend", "image", "workspace", "tools", "cpu", "memory_mb", "disk_mb", "pids",
                "network", "env", "ttl_s", "idle_timeout_s", "labels", "trajectory", "lease",
                "on_lease_expiry", "id", "state", "node", "created_at", "error", "display"],
    "NetworkPolicy": ["mode", "allow"],
    "ExecRequest": ["argv", "cmd", "stdin", "stdin_b64", "env", "cwd", "timeout_s", "wait",
                    "max_output_bytes", "step", "tty", "rows", "cols"],
    "ExecResult": ["exec_id", "state", "exit_code", "signal", "timed_out", "stdout", "stderr",
                   "stdout_truncated", "stderr_truncated", "duration_ms", "replayed"],
    "StreamOutputLine": ["seq", "stream", "data"],
    "StreamResultLine": ["seq", "result"],
    "CallRequest": ["language", "code", "stdin", "args", "timeout_s", "memory_mb", "cases", "compare",
                    "image"],
    "CallResult": ["verdict", "exit_code", "signal", "stdout", "stderr", "timed_out", "duration_ms",
                   "cpu_ms", "memory_peak_kb", "compile", "cases"],
    "Layer": ["name", "tag", "digest", "kind", "size", "created_at"],
    "Error": ["error"],
    "Lease": ["id", "expires_at"],
    "Trajectory": ["id", "steps"],
    "BatchCreateRequest": ["count", "spec"],
    "BatchCreateResult": ["sandboxes", "errors"],
    "SignalRequest": ["signal"],
    "LeaseRequest": ["ttl_s"],
    "CallBatchRequest": ["calls"],
    "CallBatchResult": ["results"],
}
# The additions the server makes beyond the contract (each must be marked x-warren-addition).
ADDITIONS = {("ExecRequest", "binary"), ("ExecRequest", "stdin_open"), ("ExecResult", "stdout_b64"), ("ExecResult", "stderr_b64"),
             ("ExecResult", "error"), ("StreamOutputLine", "data_b64"), ("Layer", "ref"),
             ("Layer", "source"), ("SandboxSpec", "open_files"), ("Sandbox", "open_files"),
             ("Sandbox", "layers"), ("Sandbox", "density"), ("Sandbox", "owner"), ("Lease", "owner"), ("Lease", "ttl_s"),
             ("Lease", "created_at"), ("Lease", "lost"), ("CallRequest", "max_output_bytes"), ("CallRequest", "env"),
             ("CallResult", "stdout_truncated"), ("CallResult", "stderr_truncated"),
             ("CallCaseResult", "signal"), ("CallCaseResult", "stderr"), ("CallCaseResult", "timed_out"),
             ("CallCaseResult", "stdout_truncated"), ("CallCaseResult", "stderr_truncated"),
             ("CallRequest", "binary"), ("CallResult", "stdout_b64"), ("CallResult", "stderr_b64"),
             ("CallCaseResult", "stdout_b64"), ("CallCaseResult", "stderr_b64"),
             ("SandboxSpec", "filesystem"), ("Sandbox", "filesystem"),
             # Replay into a new sandbox re-runs recorded steps (issue 24): what to do when a
             # re-run's output differs, and the report of it.
             ("SandboxSpec", "on_divergence"), ("Sandbox", "on_divergence"), ("Sandbox", "replay_stopped"),
             ("ExecResult", "diverged"), ("ExecResult", "differs"), ("ExecResult", "rerun"),
             ("ExecResult", "recorded"),
             # A cluster (issue 25): a sandbox whose node stopped heartbeating is `lost`, and why.
             ("Sandbox", "reason"), ("Sandbox", "lineage"),
             # Labels the sandbox's node must carry (warren.node=NAME: that node).
             ("SandboxSpec", "node_selector"), ("Sandbox", "node_selector")}

ERROR_STATUS = {"invalid": 400, "unauthorized": 401, "forbidden": 403, "not_found": 404,
                "conflict": 409, "quota": 429, "internal": 500, "unavailable": 503}
ERROR_RESPONSES = {"Invalid": "400", "Unauthorized": "401", "Forbidden": "403", "NotFound": "404",
                   "Conflict": "409", "PayloadTooLarge": "413", "Quota": "429", "Internal": "500",
                   "Unavailable": "503"}


# ----------------------------------------------------------------------------
# the document
# ----------------------------------------------------------------------------
def _load() -> dict:
    with open(SPEC_FILE) as f:
        return yaml.safe_load(f)


try:
    SPEC = _load()
    _LOAD_ERROR = None
except Exception as e:  # reported by test_document_parses, not as a collection error
    SPEC, _LOAD_ERROR = {}, e


def operations(spec: dict = None) -> List[Tuple[str, str, dict, dict]]:
    """(path, method, operation, path item) for every operation."""
    spec = SPEC if spec is None else spec
    out = []
    for path, item in (spec.get("paths") or {}).items():
        for m in METHODS:
            if isinstance(item, dict) and isinstance(item.get(m), dict):
                out.append((path, m, item[m], item))
    return out


def is_planned(op: dict) -> bool:
    return op.get("x-warren-status") == "planned"


def is_cluster_only(op: dict) -> bool:
    """Served by a cluster's API servers; `warren serve` answers what x-warren-today says."""
    return op.get("x-warren-status") == "cluster"


def resolve(ref: str, spec: dict = None) -> Any:
    spec = SPEC if spec is None else spec
    assert ref.startswith("#/"), f"only local $refs are used: {ref}"
    node: Any = spec
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise KeyError(ref)
        node = node[part]
    return node


def deref(node: Any) -> Any:
    seen = set()
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        assert ref not in seen, f"$ref cycle at {ref}"
        seen.add(ref)
        node = resolve(ref)
    return node


def walk(node: Any, where: str = "#") -> Iterator[Tuple[str, Any]]:
    yield where, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from walk(v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{where}/{i}")


def op_id(path: str, method: str, op: dict) -> str:
    return op.get("operationId") or f"{method.upper()} {path}"


def json_body_schema(op: dict) -> Optional[dict]:
    rb = deref(op.get("requestBody") or {})
    media = (rb.get("content") or {}).get("application/json")
    return media.get("schema") if media else None


def json_body_example(op: dict) -> Any:
    rb = deref(op.get("requestBody") or {})
    media = (rb.get("content") or {}).get("application/json") or {}
    return copy.deepcopy(media.get("example"))


# ----------------------------------------------------------------------------
# a small validator for the OpenAPI 3.0 schema subset this document uses
# ----------------------------------------------------------------------------
def _type_ok(t: str, v: Any) -> bool:
    return {
        "object": lambda: isinstance(v, dict),
        "array": lambda: isinstance(v, list),
        "string": lambda: isinstance(v, str),
        "boolean": lambda: isinstance(v, bool),
        "integer": lambda: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda: isinstance(v, (int, float)) and not isinstance(v, bool),
    }[t]()


def check(schema: Any, value: Any, where: str = "$", strict: bool = True) -> List[str]:
    """Errors of ``value`` against ``schema``. ``strict``: object fields the schema does not
    declare are errors even without ``additionalProperties: false`` (an undocumented field)."""
    schema = deref(schema)
    if not isinstance(schema, dict):
        return [f"{where}: bad schema {schema!r}"]
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: null is not allowed"]
    errs: List[str] = []
    for sub in schema.get("allOf") or []:
        errs += check(sub, value, where, strict=False)
    if "oneOf" in schema:
        ok = [s for s in schema["oneOf"] if not check(s, value, where, strict)]
        if len(ok) != 1:
            errs.append(f"{where}: matches {len(ok)} of oneOf (want exactly 1): {value!r:.200}")
    if "anyOf" in schema and not any(not check(s, value, where, strict) for s in schema["anyOf"]):
        errs.append(f"{where}: matches none of anyOf")
    t = schema.get("type")
    if t and not _type_ok(t, value):
        return errs + [f"{where}: want {t}, got {type(value).__name__} {value!r:.100}"]
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{where}: {value!r} not in {schema['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errs.append(f"{where}: {value} < minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errs.append(f"{where}: {value} > maximum {schema['maximum']}")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errs.append(f"{where}: {value!r} does not match {schema['pattern']}")
        if "minLength" in schema and len(value) < schema["minLength"]:
            errs.append(f"{where}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errs.append(f"{where}: longer than {schema['maxLength']}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errs.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(f"{where}: more than {schema['maxItems']} items")
        if "items" in schema:
            for i, v in enumerate(value):
                errs += check(schema["items"], v, f"{where}[{i}]", strict)
    if isinstance(value, dict) and (t == "object" or "properties" in schema):
        props = schema.get("properties") or {}
        for r in schema.get("required") or []:
            if r not in value:
                errs.append(f"{where}: missing required field {r!r}")
        addl = schema.get("additionalProperties", None)
        for k, v in value.items():
            if k in props:
                errs += check(props[k], v, f"{where}.{k}", strict)
            elif addl is False:
                errs.append(f"{where}: field {k!r} is not allowed")
            elif isinstance(addl, dict):
                errs += check(addl, v, f"{where}.{k}", strict)
            elif strict and props:
                errs.append(f"{where}: undocumented field {k!r}")
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            errs.append(f"{where}: more than {schema['maxProperties']} fields")
    return errs


def merged(schema: Any) -> dict:
    """The schema with its $ref followed and its allOf parts merged in (properties united)."""
    schema = deref(schema)
    if not isinstance(schema, dict):
        return {}
    out = {k: v for k, v in schema.items() if k != "allOf"}
    props = dict(out.get("properties") or {})
    for sub in schema.get("allOf") or []:
        sub = merged(sub)
        for k, v in sub.items():
            if k == "properties":
                props.update(v)
            elif k == "additionalProperties" and v is False:
                out[k] = False
            else:
                out.setdefault(k, v)
    if props:
        out["properties"] = props
    return out


def object_locations(schema: Any, loc: Tuple[str, ...] = (), depth: int = 0
                     ) -> Iterator[Tuple[Tuple[str, ...], dict]]:
    """(location, merged schema) of every object schema reachable through properties (not arrays)."""
    m = merged(schema)
    if depth > 8 or not (m.get("type") == "object" or "properties" in m):
        return
    yield loc, m
    for name, p in (m.get("properties") or {}).items():
        yield from object_locations(p, loc + (name,), depth + 1)


def property_locations(schema: Any, loc: Tuple[str, ...] = ()) -> Iterator[Tuple[Tuple[str, ...], dict]]:
    """(location, merged property schema) of every property of every object location."""
    for oloc, osch in object_locations(schema, loc):
        for name, p in (osch.get("properties") or {}).items():
            yield oloc + (name,), merged(p)


def set_at(body: dict, loc: Tuple[str, ...], value: Any) -> dict:
    body = copy.deepcopy(body)
    node = body
    for part in loc[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[loc[-1]] = value
    return body


# ----------------------------------------------------------------------------
# (a) the document on its own
# ----------------------------------------------------------------------------
def test_document_parses():
    assert _LOAD_ERROR is None, f"{SPEC_FILE} does not parse: {_LOAD_ERROR}"
    assert isinstance(SPEC, dict)
    assert re.fullmatch(r"3\.0\.\d+", str(SPEC.get("openapi"))), SPEC.get("openapi")
    info = SPEC.get("info") or {}
    assert info.get("title") and info.get("version"), info
    assert isinstance(SPEC.get("paths"), dict) and SPEC["paths"]
    assert isinstance(SPEC.get("components"), dict)


def test_every_path_has_operations():
    ids = set()
    for path, item in SPEC["paths"].items():
        assert path.startswith("/"), path
        ops = [m for m in METHODS if m in item]
        assert ops, f"{path} has no operations"
        extra = set(item) - set(METHODS) - {"parameters", "summary", "description", "servers"}
        assert not extra, f"{path}: unknown keys {extra}"
    for path, method, op, _ in operations():
        oid = op.get("operationId")
        assert oid and oid not in ids, f"{method} {path}: missing or duplicate operationId {oid!r}"
        ids.add(oid)
        assert op.get("summary"), f"{oid}: no summary"
        resp = op.get("responses")
        assert isinstance(resp, dict) and resp, f"{oid}: no responses"
        for status, r in resp.items():
            assert re.fullmatch(r"[1-5]\d\d|default", str(status)), f"{oid}: bad status {status!r}"
            assert "description" in deref(r), f"{oid} {status}: no description"
        assert any(str(s).startswith("2") for s in resp), f"{oid}: no success response"


def test_every_ref_resolves():
    n = 0
    for where, node in walk(SPEC):
        if isinstance(node, dict) and "$ref" in node:
            n += 1
            try:
                deref(node)
            except KeyError:
                pytest.fail(f"{where}: $ref {node['$ref']} does not resolve")
    assert n > 50


SCHEMA_KEYWORDS = {"type", "format", "nullable", "enum", "default", "description", "example", "title",
                   "properties", "required", "additionalProperties", "items", "minimum", "maximum",
                   "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minItems", "maxItems",
                   "uniqueItems", "minLength", "maxLength", "pattern", "minProperties", "maxProperties",
                   "allOf", "oneOf", "anyOf", "not", "$ref", "readOnly", "writeOnly", "deprecated",
                   "discriminator", "externalDocs", "xml"}
TYPES = {"object", "array", "string", "integer", "number", "boolean"}


def _schemas_in_document() -> Iterator[Tuple[str, dict]]:
    """Every schema object: the components' and the inline ones of parameters and media types."""
    def sub(schema: Any, where: str) -> Iterator[Tuple[str, dict]]:
        if not isinstance(schema, dict):
            return
        yield where, schema
        for name, p in (schema.get("properties") or {}).items():
            yield from sub(p, f"{where}/properties/{name}")
        for k in ("items", "additionalProperties", "not"):
            if isinstance(schema.get(k), dict):
                yield from sub(schema[k], f"{where}/{k}")
        for k in ("allOf", "oneOf", "anyOf"):
            for i, s in enumerate(schema.get(k) or []):
                yield from sub(s, f"{where}/{k}/{i}")
    for name, s in SPEC["components"]["schemas"].items():
        yield from sub(s, f"#/components/schemas/{name}")
    for where, node in walk(SPEC):
        if where.startswith("#/components/schemas"):
            continue
        if isinstance(node, dict) and isinstance(node.get("schema"), dict):
            yield from sub(node["schema"], where + "/schema")


def test_schemas_use_only_openapi_keywords():
    """Catches YAML slips such as an unquoted comma in a flow mapping making a stray key."""
    n = 0
    for where, s in _schemas_in_document():
        n += 1
        bad = [k for k in s if k not in SCHEMA_KEYWORDS and not str(k).startswith("x-")]
        assert not bad, f"{where}: not OpenAPI schema keywords: {bad}"
        if "type" in s:
            assert s["type"] in TYPES, f"{where}: type {s['type']!r}"
        if "$ref" in s:
            assert set(s) == {"$ref"}, f"{where}: keys beside $ref are ignored in OpenAPI 3.0: {set(s)}"
        if "required" in s:
            assert set(s["required"]) <= set(s.get("properties") or {}), f"{where}: required but undefined"
        if "enum" in s and "default" in s:
            assert s["default"] in s["enum"], f"{where}: default not in enum"
    assert n > 100


def test_path_parameters_declared():
    for path, method, op, item in operations():
        declared = {}
        for p in (item.get("parameters") or []) + (op.get("parameters") or []):
            p = deref(p)
            assert p.get("in") in ("path", "query", "header", "cookie"), p
            assert "schema" in p, f"{method} {path}: parameter {p.get('name')} has no schema"
            declared[(p["in"], p["name"])] = p
        in_template = set(re.findall(r"{([^}]+)}", path))
        in_params = {name for (where, name) in declared if where == "path"}
        assert in_template == in_params, f"{method} {path}: template {in_template} vs declared {in_params}"
        for name in in_params:
            assert declared[("path", name)].get("required") is True, f"{method} {path}: {name} not required"


def test_security_is_bearer():
    schemes = SPEC["components"].get("securitySchemes") or {}
    assert schemes.get("bearerAuth") == {**schemes.get("bearerAuth", {}), "type": "http", "scheme": "bearer"}
    assert SPEC.get("security") == [{"bearerAuth": []}]
    for path, method, op, _ in operations():
        if path == "/healthz":
            assert op.get("security") == [], "GET /healthz needs no token"
        else:
            assert "security" not in op, f"{method} {path} overrides the bearer requirement"
            assert "401" in op["responses"], f"{method} {path}: no 401 response"


def test_errors_use_the_error_shape_and_status_per_code():
    responses = SPEC["components"]["responses"]
    assert set(ERROR_RESPONSES) <= set(responses), set(ERROR_RESPONSES) - set(responses)
    codes = deref({"$ref": "#/components/schemas/ErrorCode"})["enum"]
    assert set(codes) == set(ERROR_STATUS), codes
    err = deref({"$ref": "#/components/schemas/Error"})
    assert err["required"] == ["error"] and set(err["properties"]["error"]["required"]) == {"code", "message"}
    for name, r in responses.items():
        schema = r["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/Error"}, name
        if "example" in r["content"]["application/json"]:
            ex = r["content"]["application/json"]["example"]
            assert not check(schema, ex), check(schema, ex)
            if name != "PayloadTooLarge":
                assert ERROR_STATUS[ex["error"]["code"]] == int(ERROR_RESPONSES[name]), name
    for path, method, op, _ in operations():
        for status, r in op["responses"].items():
            ref = r.get("$ref", "")
            if str(status)[0] in "45":
                assert ref.startswith("#/components/responses/"), f"{method} {path} {status}: not an error response"
                assert ERROR_RESPONSES.get(ref.rsplit("/", 1)[1]) == str(status), \
                    f"{method} {path}: {ref} under status {status}"


def test_contract_surface_is_covered():
    have = {(m, p) for p, m, _, _ in operations()}
    missing = [r for r in CONTRACT_ROUTES if r not in have]
    assert not missing, f"contract routes missing from the yaml: {missing}"
    extra = have - set(CONTRACT_ROUTES)
    assert not extra, f"routes beyond the contract (add them to CONTRACT_ROUTES with a note): {extra}"
    schemas = SPEC["components"]["schemas"]
    for name, fields in CONTRACT_FIELDS.items():
        assert name in schemas, f"schema {name} missing"
        props = deref(schemas[name]).get("properties") or {}
        missing = set(fields) - set(props)
        assert not missing, f"{name}: contract fields missing: {missing}"
        for f, p in props.items():
            marked = isinstance(p, dict) and p.get("x-warren-addition") is True
            if f not in fields:
                assert marked, f"{name}.{f} is beyond the contract: mark it x-warren-addition"
                assert (name, f) in ADDITIONS, f"{name}.{f}: a new addition (list it in ADDITIONS)"
            else:
                assert not marked, f"{name}.{f} is in the contract but marked as an addition"
    for name, f in ADDITIONS:
        assert f in deref(schemas[name])["properties"], f"{name}.{f} (a server addition) is not documented"
    for name in ("SandboxSpec", "NetworkPolicy", "ExecRequest", "BatchCreateRequest", "SignalRequest",
                 "CallRequest", "CallBatchRequest", "LeaseRequest"):
        assert schemas[name].get("additionalProperties") is False, f"{name}: unknown fields are errors"


def test_planned_markings_are_complete():
    for path, method, op, _ in operations():
        today = op.get("x-warren-today")
        if is_planned(op) or is_cluster_only(op):
            assert isinstance(today, dict), f"{method} {path}: planned without x-warren-today"
            assert str(today["status"]) in op["responses"], f"{method} {path}: today's status undocumented"
            assert ERROR_STATUS[today["code"]] == today["status"]
            assert today.get("message"), f"{method} {path}"
        else:
            assert today is None and "x-warren-status" not in op, f"{method} {path}"
    for name, s in SPEC["components"]["schemas"].items():
        for where, node in walk(s, name):
            if not isinstance(node, dict):
                continue
            if node.get("x-warren-status") == "planned" or "x-warren-planned-values" in node:
                today = node.get("x-warren-today")
                assert isinstance(today, dict) and today.get("status") and today.get("code"), where
                for v in node.get("x-warren-planned-values", []):
                    assert v in node.get("enum", []), f"{where}: planned value {v!r} not in the enum"
                if node.get("x-warren-status") == "planned":
                    assert "example" in today, f"{where}: x-warren-today needs an example value"


def test_examples_match_their_schemas():
    n = 0
    for path, method, op, item in operations():
        rb = deref(op.get("requestBody") or {})
        for ctype, media in (rb.get("content") or {}).items():
            if "example" in media:
                n += 1
                errs = check(media["schema"], media["example"])
                assert not errs, f"{method} {path} request example: {errs}"
        for p in (item.get("parameters") or []) + (op.get("parameters") or []):
            p = deref(p)
            if "example" in p:
                n += 1
                errs = check(p["schema"], p["example"])
                assert not errs, f"{method} {path} parameter {p['name']} example: {errs}"
    for name, s in SPEC["components"]["schemas"].items():
        for where, node in walk(s, name):
            if isinstance(node, dict) and "example" in node and "type" in node:
                n += 1
                errs = check(node, node["example"], where)
                assert not errs, errs
    assert n > 10


# ----------------------------------------------------------------------------
# (b) and (c): the live server
# ----------------------------------------------------------------------------
def _tar(files: Dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _with_image(body: Any, image: str) -> Any:
    """The example body with every `image` replaced by the test image."""
    if isinstance(body, dict):
        return {k: (image if k == "image" and isinstance(v, str) else _with_image(v, image))
                for k, v in body.items()}
    if isinstance(body, list):
        return [_with_image(v, image) for v in body]
    return body


class Ctx:
    """Real objects for the operations' parameters, made through the API."""

    def __init__(self, server, image: str):
        self.server = server
        self.image = image
        self.created: List[str] = []
        self.layers: List[str] = []
        self.tokens: List[str] = []
        r = server.http("POST", "/v1/sandboxes", {"image": image})
        assert r.status == 201, r
        self.sandbox = r.json["id"]
        self.created.append(self.sandbox)
        r = server.http("POST", f"/v1/sandboxes/{self.sandbox}/exec", {"cmd": "echo out; echo err >&2"})
        assert r.status == 200, r
        self.finished_exec = r.json["exec_id"]
        self.file = "/tmp/openapi-test.txt"
        r = server.http("PUT", f"/v1/sandboxes/{self.sandbox}/files?path={self.file}", b"hello\n")
        assert r.status == 204, r
        self.trajectory = u.unique("openapi-traj")
        r = server.http("POST", "/v1/sandboxes", {"image": image, "trajectory": self.trajectory})
        assert r.status == 201, r
        self.created.append(r.json["id"])
        r = server.http("POST", f"/v1/sandboxes/{r.json['id']}/exec", {"argv": ["echo", "step0"]})
        assert r.status == 200, r
        self.leases: List[str] = []

    def new_sandbox(self) -> str:
        r = self.server.http("POST", "/v1/sandboxes", {"image": self.image})
        assert r.status == 201, r
        self.created.append(r.json["id"])
        return r.json["id"]

    def new_layer(self) -> Tuple[str, str]:
        name, tag = u.unique("openapi-layer"), "t1"
        r = self.server.http("POST", f"/v1/layers?name={name}&tag={tag}&kind=tool",
                             _tar({"hello.txt": b"hi\n"}), headers={"Content-Type": "application/x-tar"},
                             timeout=300)
        assert r.status == 201, r
        self.layers.append(f"{name}:{tag}")
        return name, tag

    def new_lease(self) -> str:
        r = self.server.http("POST", "/v1/leases", {"ttl_s": 600})
        assert r.status == 200, r
        self.leases.append(r.json["id"])
        return r.json["id"]

    def new_token(self) -> str:
        name = u.unique("openapi-token")
        r = self.server.http("POST", "/v1/tokens", {"name": name})
        assert r.status == 201, r
        self.tokens.append(name)
        return name

    def spare_node(self) -> str:
        """A cluster's ready node that does not hold ctx.sandbox (a drain deletes what a node
        holds, and the module's later tests still use ctx.sandbox)."""
        mine = self.server.http("GET", f"/v1/sandboxes/{self.sandbox}").json["node"]
        nodes = self.server.http("GET", "/v1/nodes").json["nodes"]
        spare = [n["name"] for n in nodes if n["state"] == "ready" and n["name"] != mine]
        assert spare, f"no ready node besides {mine}: {nodes}"
        return spare[0]

    def running_exec(self, oid: str = "signalExec") -> str:
        """A running exec of the kind operation `oid` acts on: input needs an open stdin,
        resize a terminal."""
        body = {"argv": ["sleep", "30"], "wait": False}
        if oid == "writeExecInput":
            body = {"argv": ["cat"], "stdin_open": True, "timeout_s": 30}
        elif oid == "resizeExec":
            body = {"argv": ["sleep", "30"], "tty": True}
        r = self.server.http("POST", f"/v1/sandboxes/{self.sandbox}/exec", body)
        assert r.status == 202, r
        return r.json["exec_id"]

    def cleanup(self) -> None:
        for sid in self.created:
            self.server.http("DELETE", "/v1/sandboxes/" + sid, timeout=60)
        for ref in self.layers:
            self.server.http("DELETE", "/v1/layers/" + ref, timeout=60)
        for lid in self.leases:
            self.server.http("DELETE", "/v1/leases/" + lid, timeout=60)
        for name in self.tokens:
            self.server.http("DELETE", "/v1/tokens/" + name, timeout=60)


@pytest.fixture(scope="module")
def ctx(server, image):
    c = Ctx(server, image)
    try:
        yield c
    finally:
        c.cleanup()


def _params(path: str, op: dict, item: dict) -> List[dict]:
    return [deref(p) for p in (item.get("parameters") or []) + (op.get("parameters") or [])]


def build_request(ctx: Ctx, path: str, method: str, op: dict, item: dict,
                  overrides: Optional[Dict[str, str]] = None):
    """(target, body, headers) of a valid request to the operation, from its examples and ctx."""
    overrides = dict(overrides or {})
    values: Dict[str, str] = {}
    if path.startswith("/v1/sandboxes/"):
        values.update({"id": ctx.sandbox, "exec_id": ctx.finished_exec,
                       "path": "/tmp" if path.endswith("/archive") else ctx.file})
    elif path.startswith("/v1/leases/"):
        values["id"] = ctx.new_lease()
    elif path.startswith("/v1/trajectories/"):
        values["id"] = ctx.trajectory
    values.update(overrides)
    target = path
    query = []
    for p in _params(path, op, item):
        val = values.get(p["name"], p.get("example", p["schema"].get("default")))
        if p["in"] == "path":
            assert val is not None, f"{method} {path}: no value for path parameter {p['name']}"
            target = target.replace("{" + p["name"] + "}", urllib.parse.quote(str(val), safe=""))
        elif p["in"] == "query" and (p.get("required") or p["name"] in overrides) and val is not None:
            for v in (val if isinstance(val, list) else [val]):
                query.append((p["name"], str(v)))
    if query:
        target += "?" + urllib.parse.urlencode(query)
    body, headers = None, {}
    rb = deref(op.get("requestBody") or {})
    content = rb.get("content") or {}
    if "application/json" in content:
        body = _with_image(json_body_example(op), ctx.image)
        assert body is not None, f"{method} {path}: the JSON request body has no example"
    elif "application/x-tar" in content:
        body, headers = _tar({"from-openapi.txt": b"tar\n"}), {"Content-Type": "application/x-tar"}
    elif "application/octet-stream" in content:
        body, headers = b"openapi test body\n", {"Content-Type": "application/octet-stream"}
    return target, body, headers


def _error_of(r: u.Response) -> dict:
    try:
        err = json.loads(r.body)["error"]
    except Exception:
        return {}
    return err if isinstance(err, dict) else {}


def is_unrouted(r: u.Response) -> bool:
    """The server's answer to a path it does not route: 404 and a message about the path
    ("path `TARGET`: not found", or "path: not found" while the target is lost)."""
    msg = _error_of(r).get("message", "")
    return r.status == 404 and (msg.startswith("path:") or msg.startswith("path `"))


def check_response(op: dict, method: str, path: str, r: u.Response) -> None:
    """The answer is documented for the operation and matches its schema (strictly)."""
    where = f"{method.upper()} {path} -> {r.status}"
    assert str(r.status) in op["responses"], f"{where}: status not documented: {r!r}"
    resp = deref(op["responses"][str(r.status)])
    content = resp.get("content") or {}
    if not content:
        assert r.body == b"", f"{where}: documented without a body but got {r.body[:200]!r}"
        return
    ctype = (r.headers.get("Content-Type") or "").split(";")[0].strip()
    assert ctype in content, f"{where}: Content-Type {ctype!r} not in {list(content)}"
    schema = content[ctype].get("schema")
    if ctype == "application/json":
        errs = check(schema, json.loads(r.body))
        assert not errs, f"{where}: the body does not match the yaml:\n" + "\n".join(errs)
    elif ctype == "application/x-ndjson":
        lines = u.ndjson_lines(r.body)
        assert lines, f"{where}: an empty stream"
        for i, line in enumerate(lines):
            errs = check(schema, line, f"line {i}")
            assert not errs, f"{where}: a stream line does not match the yaml:\n" + "\n".join(errs)


def _op_params() -> List[Any]:
    return [pytest.param(path, method, id=op_id(path, method, op)) for path, method, op, _ in operations()]


def _find(path: str, method: str) -> Tuple[dict, dict]:
    return SPEC["paths"][path][method], SPEC["paths"][path]


@pytest.mark.parametrize("path,method", _op_params())
def test_operation_against_server(server, ctx, sandboxes, path, method, request):
    """(b) Routed and answering as documented; planned ones answer what x-warren-today says."""
    op, item = _find(path, method)
    oid = op_id(path, method, op)
    if oid in ("call", "callMany"):
        request.getfixturevalue("runner")  # the server's default runner image must exist
    overrides: Dict[str, str] = {}
    if oid in RUNNING_EXEC_OPS:
        overrides["exec_id"] = ctx.running_exec(oid)
    elif oid == "deleteSandbox":
        overrides["id"] = ctx.new_sandbox()
    elif oid in ("deleteLayer", "inspectLayer"):
        overrides["name"], overrides["tag"] = ctx.new_layer()
    elif oid == "deleteToken":
        overrides["name"] = ctx.new_token()
    elif oid == "uploadLayer":
        overrides["name"], overrides["tag"] = u.unique("openapi-up"), "t1"
        ctx.layers.append(f"{overrides['name']}:{overrides['tag']}")
    # A cluster serves what serve answers x-warren-today to: cordon and drain a real node,
    # and put it back afterwards.
    live = not is_planned(op) and (server.cluster or not is_cluster_only(op))
    node_op = live and is_cluster_only(op) and path.startswith("/v1/nodes/{name}/")
    if node_op:
        overrides["name"] = ctx.spare_node()
    target, body, headers = build_request(ctx, path, method, op, item, overrides)
    if oid == "createToken":
        body = dict(body, name=u.unique("openapi-token"))
        ctx.tokens.append(body["name"])
    try:
        r = server.http(method.upper(), target, body, headers=headers or None, timeout=300)
    finally:
        if node_op:
            back = server.http("POST", f"/v1/nodes/{overrides['name']}/uncordon")
            assert back.status == 200 and back.json["state"] == "ready", back
    if oid == "createSandboxes" and r.status == 200:     # to delete after the test
        sandboxes.extend(s["id"] for s in r.json.get("sandboxes", []))
    if oid == "createSandbox" and r.status == 201:
        sandboxes.append(r.json["id"])
    if oid == "forkSandbox" and r.status == 201:
        sandboxes.extend(s["id"] for s in r.json.get("sandboxes", []))
    if oid == "snapshotSandbox" and r.status == 201:
        ctx.layers.append(r.json["ref"])

    if not live:
        today = op["x-warren-today"]
        err = u.assert_error(r, today["status"], today["code"])
        assert today["message"] in err["message"], f"{oid}: today's message {err['message']!r}"
        if today["status"] == 404:
            assert is_unrouted(r), f"{oid}: documented as unrouted today, but: {r!r}"
        check_response(op, method, path, r)
        return

    assert not is_unrouted(r), f"{oid} ({method.upper()} {target}) is not routed by the server: {r!r}"
    if oid in DESKTOP_OPS:
        # ctx.sandbox has no display (a desktop image takes a Debian build: test_desktop.py
        # does that): the documented 409 naming it.
        err = u.assert_error(r, 409, "conflict")
        assert "display" in err["message"], err
        check_response(op, method, path, r)
        return
    assert 200 <= r.status < 300, f"{oid}: the documented example request failed: {r!r}"
    check_response(op, method, path, r)

    if oid == "signalExec":   # the signal arrived: the exec ends killed by TERM
        url = f"/v1/sandboxes/{ctx.sandbox}/execs/{overrides['exec_id']}"
        res = u.wait_until(lambda: (lambda x: x if x["state"] == "exited" else None)(
            server.http("GET", url).json), timeout=20)
        assert res and res["signal"] == "TERM" and res["exit_code"] == 128 + 15, res
    if oid == "metrics":
        text = r.body.decode()
        for name in ("warren_sandboxes", "warren_create_seconds", "warren_exec_seconds",
                     "warren_api_errors_total", "warren_egress_bytes_total"):
            assert name in text, f"/metrics lacks {name}"


@pytest.mark.parametrize("path,method", [pytest.param(p, m, id=op_id(p, m, o))
                                         for p, m, o, _ in operations() if p != "/healthz"])
def test_operation_needs_the_token(server, ctx, path, method):
    """Every operation but /healthz answers 401 without a token, as the yaml's security says."""
    op, item = _find(path, method)
    target, _, _ = build_request(ctx, path, method, op, item)
    u.assert_error(server.http(method.upper(), target, auth=False), 401, "unauthorized")


def _body_ops() -> List[Tuple[str, str, dict, dict]]:
    return [(p, m, o, i) for p, m, o, i in operations() if json_body_schema(o) is not None]


def _unknown_field_params() -> List[Any]:
    out = []
    for path, method, op, _ in _body_ops():
        if is_planned(op):
            continue
        for loc, s in object_locations(json_body_schema(op)):
            if s.get("additionalProperties") is False:
                out.append(pytest.param(path, method, loc,
                                        id=f"{op_id(path, method, op)}:{'.'.join(loc) or '(top)'}"))
    return out


@pytest.mark.parametrize("path,method,loc", _unknown_field_params())
def test_unknown_field_is_rejected(server, ctx, sandboxes, path, method, loc):
    """(c) Wherever the yaml says additionalProperties: false, the server says 400 invalid."""
    op, item = _find(path, method)
    oid = op_id(path, method, op)
    overrides = {"exec_id": ctx.running_exec(oid)} if oid in RUNNING_EXEC_OPS else {}
    target, body, _ = build_request(ctx, path, method, op, item, overrides)
    body = set_at(body, loc + (UNKNOWN,), 1)
    r = server.http(method.upper(), target, body)
    if oid == "createSandboxes" and r.status == 200:
        sandboxes.extend(s["id"] for s in r.json.get("sandboxes", []))
    if oid == "createSandbox" and r.status == 201:
        sandboxes.append(r.json["id"])
    if oid == "forkSandbox" and r.status == 201:
        sandboxes.extend(s["id"] for s in r.json.get("sandboxes", []))
    if oid == "snapshotSandbox" and r.status == 201:
        ctx.layers.append(r.json["ref"])
    err = u.assert_error(r, 400, "invalid")
    assert UNKNOWN in err["message"], err


def test_unknown_field_params_cover_the_request_schemas():
    got = {p.id for p in _unknown_field_params()}
    for want in ("createSandbox:(top)", "createSandbox:network", "createSandboxes:(top)",
                 "createSandboxes:spec", "createSandboxes:spec.network", "setNetwork:(top)",
                 "setFilesystem:(top)", "createSandbox:filesystem",
                 "exec:(top)", "signalExec:(top)", "writeExecInput:(top)",
                 "resizeExec:(top)"):
        assert want in got, (want, sorted(got))


def _planned_value_params() -> List[Any]:
    out = []
    for path, method, op, _ in _body_ops():
        if is_planned(op):
            continue
        for loc, p in property_locations(json_body_schema(op)):
            today = p.get("x-warren-today")
            if p.get("x-warren-status") == "planned":
                out.append(pytest.param(path, method, loc, today["example"], today,
                                        id=f"{op_id(path, method, op)}:{'.'.join(loc)}"))
            for v in p.get("x-warren-planned-values", []):
                out.append(pytest.param(path, method, loc, v, today,
                                        id=f"{op_id(path, method, op)}:{'.'.join(loc)}={v}"))
    return out


def test_planned_values_answer_as_documented(server, ctx, sandboxes):
    """(b) A planned field or enum value gets x-warren-today's answer (batch: per index)."""
    for p in _planned_value_params():
        _check_planned_value(server, ctx, sandboxes, *p.values)


def _check_planned_value(server, ctx, sandboxes, path, method, loc, value, today):
    op, item = _find(path, method)
    target, body, _ = build_request(ctx, path, method, op, item)
    body = set_at(body, loc, value)
    r = server.http(method.upper(), target, body)
    oid = op_id(path, method, op)
    if oid == "createSandboxes":
        assert r.status == 200, r
        sandboxes.extend(s["id"] for s in r.json["sandboxes"])
        assert r.json["sandboxes"] == [] and len(r.json["errors"]) == body["count"], r
        for e in r.json["errors"]:
            assert e["error"]["code"] == today["code"] and today["message"] in e["error"]["message"], e
        return
    if oid == "createSandbox" and r.status == 201:
        sandboxes.append(r.json["id"])
    if oid == "forkSandbox" and r.status == 201:
        sandboxes.extend(s["id"] for s in r.json.get("sandboxes", []))
    if oid == "snapshotSandbox" and r.status == 201:
        ctx.layers.append(r.json["ref"])
    err = u.assert_error(r, today["status"], today["code"])
    assert today["message"] in err["message"], err


def test_planned_value_params_cover_the_contract_gaps():
    """Every contract gap the server has today, and no other (backend vm was the last)."""
    got = {p.id for p in _planned_value_params()}
    assert got == set(), sorted(got)


def test_not_enforced_fields_are_accepted_and_echoed(server, image, sandboxes):
    """x-warren-enforced: false fields are stored and echoed back (they only lack an effect)."""
    spec = deref({"$ref": "#/components/schemas/SandboxSpec"})
    fields = {k for k, p in spec["properties"].items() if p.get("x-warren-enforced") is False}
    assert fields == set(), fields
    body = {"image": image, "ttl_s": 120}
    r = server.http("POST", "/v1/sandboxes", body)
    assert r.status == 201, r
    sandboxes.append(r.json["id"])
    for k in fields:
        assert r.json[k] == body[k], (k, r.json)


def test_exec_results_match_the_yaml(server, ctx):
    """ExecResult in its other shapes: running, binary, timed out, not startable; stream with data_b64."""
    schema = {"$ref": "#/components/schemas/ExecResult"}
    base = f"/v1/sandboxes/{ctx.sandbox}"
    r = server.http("POST", base + "/exec", {"argv": ["sh", "-c", "printf '\\377x'; echo e >&2"], "binary": True})
    assert r.status == 200 and not check(schema, r.json), (r, check(schema, r.json))
    assert r.json["stdout_b64"] == "/3g=" and r.json["exit_code"] == 0, r.json
    r = server.http("POST", base + "/exec", {"argv": ["sleep", "5"], "timeout_s": 0.5})
    assert r.status == 200 and not check(schema, r.json), (r, check(schema, r.json))
    assert r.json["timed_out"] is True and r.json["exit_code"] == 124 and r.json["signal"] == "KILL", r.json
    r = server.http("POST", base + "/exec", {"argv": ["true"], "cwd": "/no/such/dir"})
    assert r.status == 200 and not check(schema, r.json), (r, check(schema, r.json))
    assert r.json["exit_code"] is None and r.json.get("error"), r.json
    r = server.http("POST", base + "/exec", {"cmd": "echo a; sleep 1; echo b", "wait": False, "binary": True})
    assert r.status == 202 and not check({"$ref": "#/components/schemas/ExecStarted"}, r.json), r
    exec_id = r.json["exec_id"]
    r = server.http("GET", f"{base}/execs/{exec_id}")
    assert r.status == 200 and not check(schema, r.json), (r, check(schema, r.json))
    r = server.http("GET", f"{base}/execs/{exec_id}/stream?after=0")
    lines = u.ndjson_lines(r.body)
    for line in lines:
        assert not check({"$ref": "#/components/schemas/StreamLine"}, line), check(
            {"$ref": "#/components/schemas/StreamLine"}, line)
    assert "result" in lines[-1] and all("data_b64" in l for l in lines[:-1]), lines
    assert lines[-1]["seq"] == lines[-2]["seq"] + 1, lines
    r = server.http("GET", f"{base}/execs/{exec_id}/stream?after={lines[0]['seq']}")
    assert u.ndjson_lines(r.body) == lines[1:], "?after=SEQ resumes after SEQ"
    u.assert_error(server.http("GET", f"{base}/execs/{exec_id}/stream?after=x"), 400, "invalid")


def test_batch_errors_match_the_yaml(server, image, sandboxes):
    body = {"count": 2, "spec": {"image": "no-such-image:1"}}
    r = server.http("POST", "/v1/sandboxes:batch", body)
    assert r.status == 200, r
    sandboxes.extend(s["id"] for s in r.json["sandboxes"])
    errs = check({"$ref": "#/components/schemas/BatchCreateResult"}, r.json)
    assert not errs and [e["index"] for e in r.json["errors"]] == [0, 1], (errs, r.json)
