"""`trainstack team add`: onboarding a team is one reviewed diff of an environment's values file.

The team entry is written into overlays/ENV/values.yaml under `teams` with ruamel.yaml's
round-trip mode, so every comment, key order and quoting already in the file stays as it was.
Before anything is written the chart itself renders the changed values (the pinned helm, the
same templates as `helm template`), so the checks of a team entry live in one place, the
chart (charts/trainstack/templates/teams/_teams.tpl), and a bad entry fails here with the chart's
one line naming the team and the field, leaving the file untouched.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import io
import json
import re
import sys
import tempfile
from pathlib import Path

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from . import api, deps, helm, paths, proc, progress, tools, yamlio
from . import lock as lockmod
from .errors import UsageError, UserError, output_line
from .kubectl import Kubectl
from .render import overlay_dir, values_files

RESERVED = ("defaults", "kueue")
_YAML11_BOOLS = {"y", "n", "yes", "no", "on", "off", "true", "false"}
_CHART_ERROR = re.compile(r"^Error: (?:.*?execution error at \([^)]*\): )?")


def _yaml() -> YAML:
    y = YAML()  # round-trip: comments, order and quoting survive
    y.preserve_quotes = True
    y.width = 4096
    y.indent(mapping=2, sequence=4, offset=2)
    return y


_FLAGS = {"admin": "--admins", "edit": "--members", "view": "--viewers"}
_KINDS = {"user": "User", "group": "Group", "sa": "ServiceAccount"}


def parse_members(members: list[str], role: str) -> list[dict]:
    """`alice`, `user:alice`, `group:ml` or `sa:NAMESPACE/NAME` -> subject entries. A prefix that is not
    user:, group: or sa: (`gruop:ml`), an empty name or a ServiceAccount without its namespace is a
    UsageError naming the flag and the member; a user name with a colon is written `user:oidc:alice`."""
    out = []
    for raw in members:
        for item in (part.strip() for part in raw.split(",")):
            if not item:
                continue
            prefix, colon, rest = item.partition(":")
            if colon and prefix not in _KINDS:
                _bad_member(role, item, f"'{prefix}:' is not a member kind")
            kind, name = (prefix, rest) if colon else ("user", item)
            entry: dict = {"kind": _KINDS[kind]}
            if kind == "sa":
                namespace, slash, name = name.partition("/")
                if not (slash and namespace and name):
                    _bad_member(role, item, "a ServiceAccount is sa:NAMESPACE/NAME")
                entry["namespace"] = namespace
            if not name:
                _bad_member(role, item, "the name is empty")
            entry["name"] = name
            entry["role"] = role
            out.append(entry)
    return out


def _bad_member(role: str, item: str, why: str) -> None:
    raise UsageError(f"{_FLAGS.get(role, '--members')}: {item!r}: {why}",
                     "members are NAME, user:NAME, group:NAME or sa:NAMESPACE/NAME")


def team_entry(args: argparse.Namespace) -> dict:
    entry = CommentedMap()
    if args.namespace:
        entry["namespace"] = args.namespace
    members = CommentedSeq()
    for role, values in (("admin", args.admins), ("edit", args.members), ("view", args.viewers)):
        for member in parse_members(values or [], role):
            item = CommentedMap(member)
            item.fa.set_flow_style()
            members.append(item)
    entry["members"] = members

    def quantity(value: str):  # "32" stays a string, written "32" as values files write quantities
        text = str(value)
        return DoubleQuotedScalarString(text) if re.fullmatch(r"[0-9.eE+-]+", text) else text

    quota = CommentedMap()
    if args.cpus is not None:
        quota["cpu"] = quantity(args.cpus)
    if args.memory is not None:
        quota["memory"] = quantity(args.memory)
    if args.gpus is not None:
        quota[args.gpu_resource] = args.gpus
    if quota:
        quota.fa.set_flow_style()
        entry["quota"] = quota
    if args.borrow_gpus is not None:
        borrow = CommentedMap({args.gpu_resource: args.borrow_gpus})
        borrow.fa.set_flow_style()
        entry["borrowingLimit"] = borrow
    if args.runtimes:
        runtimes = CommentedSeq([r.strip() for r in ",".join(args.runtimes).split(",") if r.strip()])
        runtimes.fa.set_flow_style()
        entry["runtimes"] = runtimes
    if args.own_runtimes:
        entry["ownRuntimes"] = True
    return entry


def add(env: str, name: str, entry: dict, values_path: Path | None = None, check: bool = True) -> tuple[Path, str]:
    """Add team NAME to ENV's values file; returns (path, unified diff). Nothing is written when
    the chart rejects the result."""
    path = values_path or overlay_dir(env) / "values.yaml"
    # The environment's other values files (overlays/shared/...) render with it, in its kustomization's order.
    env_files = [] if values_path else values_files(env)
    rel = _relative(path)
    if name in RESERVED:
        raise UserError(f"{rel}: teams.{name}: '{name}' is reserved under teams (it holds settings); choose another team name")
    y = _yaml()
    before = path.read_text() if path.is_file() else ""
    try:
        data = y.load(before) if before.strip() else None
    except YAMLError as err:  # ruamel raises many YAMLError subclasses
        raise UserError(f"{rel}: not valid YAML: {str(err).splitlines()[0]}") from None
    if data is None:
        data = CommentedMap()
    if not isinstance(data, CommentedMap):  # the round-trip loader reads every mapping as one
        raise UserError(f"{rel}: the values file must be a YAML mapping")
    teams = data.get("teams")
    if teams is None:
        teams = CommentedMap()
        data["teams"] = teams
        data.yaml_set_comment_before_after_key(
            "teams", before="\nThe teams of this environment (docs/teams.md); `trainstack team add` adds one.")
    elif not isinstance(teams, dict):
        raise UserError(f"{rel}: teams must be a mapping of team name to team")
    if name in teams:
        raise UserError(f"{rel}: teams.{name} already exists", "edit the entry in the file, or choose another name")
    _check_namespace_free(rel, name, entry, teams)
    # YAML 1.1 (Helm's parser) reads y/n/yes/no/on/off/true/false keys as booleans: quote them.
    key = DoubleQuotedScalarString(name) if name.lower() in _YAML11_BOOLS else name
    teams[key] = entry
    buffer = io.StringIO()
    y.dump(data, buffer)
    after = buffer.getvalue()
    if check:
        _render_check(after, rel, path, env_files)
    path.write_text(after)
    diff = "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        fromfile=f"a/{rel.lstrip('/')}", tofile=f"b/{rel.lstrip('/')}"))
    return path, diff


def _check_namespace_free(rel: str, name: str, entry: dict, teams: dict) -> None:
    """The new team's namespace is nobody else's. The chart checks this too, but it goes through the
    teams in name order and blames the later one, which may be the team already in the file."""
    namespace = entry.get("namespace") or name
    for other, team in teams.items():
        taken = (team.get("namespace") if isinstance(team, dict) else None) or other
        if other not in RESERVED and taken == namespace:
            raise UserError(f"{rel}: teams.{name}.namespace: {json.dumps(str(namespace))} is already the namespace of team {other}",
                            "every team needs its own namespace: pass --namespace; nothing was written")


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(paths.repo_root()))
    except ValueError:
        return str(path)


def _render_check(values_text: str, rel: str, path: Path | None = None, env_files: list[Path] | None = None) -> None:
    """Render the chart with the new values (in place of `path` among the environment's values
    files `env_files`, when given); the chart's own checks decide (one line on failure)."""
    lock = lockmod.load()
    deps.ensure(lock)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="trainstack-team-") as handle:
        handle.write(values_text)
        handle.flush()
        own = path.resolve() if path else None
        files = [handle.name if f == own else str(f) for f in env_files or []]
        if handle.name not in files:
            files.append(handle.name)
        result = helm.run(helm.template_args(None, *[a for f in files for a in ("-f", f)],
                                             kube_version=lock.kubernetes_version), lock=lock, check=False)
    if result.returncode != 0:
        line = _CHART_ERROR.sub("", helm.first_error_line(result.stderr))  # the chart's fail message, whole
        raise UserError(f"{rel}: {line}", "nothing was written")


def _cmd_team(args: argparse.Namespace) -> int:
    if args.team_command != "add":
        raise UsageError(f"unknown team command '{args.team_command}'")
    if not (args.members or args.admins or args.viewers):
        raise UsageError("team add needs at least one of --members, --admins, --viewers")
    entry = team_entry(args)
    path, diff = add(args.env, args.name, entry, Path(args.values) if args.values else None)
    if args.output == "json":
        print(json.dumps({"file": str(path), "team": args.name, "diff": diff}, indent=2))
    else:
        sys.stdout.write(diff)
        progress.info(f"added team {args.name} to {_relative(path)}: review the diff, then commit it")
    return 0


# -- live checks over a kubeconfig (for the e2e suite) ------------------------------------------
#
# access_matrix(kubeconfig, ...) asks a real API server, impersonating a team member, what the
# member may do (`kubectl auth can-i --as`) and makes real requests (server-side dry runs and
# reads) as that member. Each row says what was expected and what the server answered; the suite
# fails on any row whose `ok` is False. The caller's kubeconfig needs impersonation (cluster admin).

TRAINJOBS = f"trainjobs.{api.TRAINER_GROUP}"
CLUSTER_RUNTIMES = f"clustertrainingruntimes.{api.TRAINER_GROUP}"


class AccessRow:
    def __init__(self, what: str, expected: bool, actual: bool, detail: str = "") -> None:
        self.what, self.expected, self.actual, self.detail = what, expected, actual, detail

    @property
    def ok(self) -> bool:
        return self.expected == self.actual

    def as_dict(self) -> dict:
        return {"what": self.what, "expected": self.expected, "actual": self.actual, "ok": self.ok,
                "detail": self.detail}


def _kubectl(kubeconfig: Path, *args: str, input_text: str | None = None) -> proc.CompletedProcess:
    return Kubectl(kubeconfig, binary=tools.require_kubectl()).kubectl(*args, input_text=input_text, check=False)


def _can_i(kubeconfig: Path, as_args: list[str], verb: str, resource: str, namespace: str | None,
           subresource: str = "") -> bool:
    args = ["auth", "can-i", verb, resource, *as_args]
    if namespace:
        args += ["-n", namespace]
    if subresource:
        args += [f"--subresource={subresource}"]
    return _kubectl(kubeconfig, *args).stdout.strip() == "yes"


def trainjob_manifest(name: str, namespace: str, team: str, runtime: str = "torch-distributed",
                      image: str | None = None) -> dict:
    """A TrainJob the team's member submits (labels for the requiredLabels and teamAccess rules)."""
    trainer: dict = {"numNodes": 1}
    if image:
        trainer["image"] = image
    return {"apiVersion": api.TRAINER_API, "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"trainstack.io/team": team, api.QUEUE_LABEL: team}},
            "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer}}


def access_matrix(kubeconfig: Path, user: str, own_namespace: str, other_namespace: str, team: str,
                  groups: tuple[str, ...] = (), system_namespace: str = api.NAMESPACE,
                  runtime: str = "torch-distributed", image: str | None = None) -> list[AccessRow]:
    """What a member of `team` (user, groups) may do in its namespace, in another team's, and on the
    platform; every row is the API server's answer, with the expectation next to it."""
    as_args = ["--as", user, *[f"--as-group={g}" for g in groups]]
    rows: list[AccessRow] = []

    def can(verb, resource, ns, expected, subresource=""):
        where = f"in {ns}" if ns else "cluster-wide"
        label = f"{verb} {resource}{'/' + subresource if subresource else ''} {where}"
        rows.append(AccessRow(label, expected, _can_i(kubeconfig, as_args, verb, resource, ns, subresource)))

    for ns, mine in ((own_namespace, True), (other_namespace, False)):
        for verb in ("create", "get", "list", "watch", "delete"):
            can(verb, TRAINJOBS, ns, mine)
        can("get", "pods", ns, mine, subresource="log")
        can("list", "pods", ns, mine)
        can("list", "events", ns, mine)
    can("list", CLUSTER_RUNTIMES, None, True)
    can("get", CLUSTER_RUNTIMES, None, True)
    for verb in ("create", "update", "patch", "delete"):
        can(verb, CLUSTER_RUNTIMES, None, False)
    can("create", "validatingadmissionpolicies.admissionregistration.k8s.io", None, False)
    can("update", "validatingadmissionpolicybindings.admissionregistration.k8s.io", None, False)
    can("update", "configmaps", system_namespace, False)
    can("update", "resourcequotas", own_namespace, False)
    can("delete", "limitranges", own_namespace, False)
    can("create", f"localqueues.{api.KUEUE_GROUP}", own_namespace, False)
    can("update", f"clusterqueues.{api.KUEUE_GROUP}", None, False)
    can("create", "rolebindings.rbac.authorization.k8s.io", own_namespace, False)

    # real requests as the member
    for ns, mine in ((own_namespace, True), (other_namespace, False)):
        job = trainjob_manifest("access-check", ns, team, runtime, image)
        result = _kubectl(kubeconfig, "create", "--dry-run=server", "-o", "name", "-f", "-", *as_args,
                          input_text=yaml.safe_dump(job))
        detail = output_line(result.stderr or result.stdout, markers=(), empty="") if result.returncode else ""
        rows.append(AccessRow(f"submit a TrainJob in {ns} (server dry run)", mine, result.returncode == 0, detail))
    listed = _kubectl(kubeconfig, "get", "clustertrainingruntimes", "-o", "name", *as_args)
    rows.append(AccessRow("read the golden ClusterTrainingRuntimes", True,
                          listed.returncode == 0 and f"clustertrainingruntime.{api.TRAINER_GROUP}/{runtime}" in listed.stdout,
                          (listed.stderr or "").strip()[:200]))
    public = _kubectl(kubeconfig, "get", "configmap", "kubeflow-trainer-public", "-n", system_namespace, "-o", "name",
                      *as_args)
    rows.append(AccessRow("read kubeflow-trainer-public (the SDK's version check)", True, public.returncode == 0,
                          (public.stderr or "").strip()[:200]))
    return rows


def member_kubeconfig(admin_kubeconfig: Path, ca_cert: Path, ca_key: Path, user: str, groups: tuple[str, ...],
                      out_dir: Path) -> Path:
    """A kubeconfig that authenticates as USER in GROUPS with a client certificate signed by the
    cluster CA (CN = user, O = each group): a real identity, as the Kubeflow SDK uses one."""
    out_dir.mkdir(parents=True, exist_ok=True)
    key, csr, crt = out_dir / "user.key", out_dir / "user.csr", out_dir / "user.crt"
    subject = "/CN=" + user + "".join(f"/O={g}" for g in groups)
    for cmd in (["openssl", "genrsa", "-out", str(key), "2048"],
                ["openssl", "req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr)],
                ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
                 "-CAcreateserial", "-days", "1", "-out", str(crt)]):
        proc.run(cmd, timeout=60)
    config = yamlio.load(admin_kubeconfig.read_text())
    cluster = config["clusters"][0]
    member = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster],
              "users": [{"name": user, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
              "contexts": [{"name": user, "context": {"cluster": cluster["name"], "user": user}}],
              "current-context": user}
    path = out_dir / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(member))
    return path


_SDK_SCRIPT = '''
import json, sys
from kubeflow.common.types import KubernetesBackendConfig
from kubeflow.trainer import CustomTrainer, TrainerClient


def train():
    print("hello from the team")


config, namespace, runtime = sys.argv[1:4]
out = {}
client = TrainerClient(backend_config=KubernetesBackendConfig(namespace=namespace, config_file=config))
try:
    out["runtimes"] = sorted(r.name for r in client.list_runtimes())
    name = client.train(runtime=runtime, trainer=CustomTrainer(func=train, num_nodes=1))
    out["job"] = name
    out["got"] = client.get_job(name).name
    client.delete_job(name)
    out["deleted"] = True
except Exception as err:  # reported to the caller, which decides what was expected
    cause = err.__cause__ or err.__context__
    out["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    out["status"] = getattr(cause, "status", None) or getattr(err, "status", None)
print(json.dumps(out))
'''


def sdk_as_member(member_config: Path, namespace: str, runtime: str = "torch-distributed") -> dict:
    """Run the Kubeflow SDK as the member (its own kubeconfig): list_runtimes(), train(), get_job(),
    delete_job() in NAMESPACE. Returns {"runtimes", "job", "got", "deleted"}, or {"error", "status"}
    (status: the HTTP status of the API error underneath, 403 when RBAC refused)."""
    with tempfile.TemporaryDirectory(prefix="trainstack-sdk-") as tmp:
        script = Path(tmp) / "sdk_member.py"
        script.write_text(_SDK_SCRIPT)
        result = proc.run([sys.executable, str(script), str(member_config), namespace, runtime], check=False,
                          timeout=180)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"error": f"sdk run failed: {(result.stderr or result.stdout).strip()[-300:]}"}
    return json.loads(lines[-1])


def golden_runtimes_pass_webhook(kubeconfig: Path, runtimes: list[dict]) -> list[AccessRow]:
    """Each golden ClusterTrainingRuntime without `trainer.kubeflow.org/webhook-validation:
    disabled`, created by server dry run under another name, so upstream's validating webhook
    (which must be serving) checks it. One row per runtime; `ok` when the webhook admitted it."""
    rows = []
    for runtime in runtimes:
        obj = copy.deepcopy(runtime)
        labels = obj["metadata"].get("labels") or {}
        labels.pop(f"{api.TRAINER_GROUP}/webhook-validation", None)
        obj["metadata"] = {"name": f"{obj['metadata']['name']}-webhook-check"[:63], "labels": labels}
        result = _kubectl(kubeconfig, "create", "--dry-run=server", "-o", "name", "-f", "-",
                          input_text=yaml.safe_dump(obj))
        detail = (result.stderr or "").strip().splitlines()
        rows.append(AccessRow(f"webhook admits {runtime['metadata']['name']}", True, result.returncode == 0,
                              detail[-1] if detail else ""))
    return rows
