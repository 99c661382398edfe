"""`trainstack smoke train`: a real torch DDP run, launched the way Kubeflow Trainer launches it.

Each "node" is one torchrun process started with exactly the PET_* variables the Trainer
controller injects into a TrainJob's `node` pods (torch plugin, v2.3.0), so what is tested here
is the contract between the golden torch runtimes and a training script: two CPU nodes with one
process each by default, or one node with every local GPU (`--gpu`). The only difference from a
cluster: PET_MASTER_ADDR is 127.0.0.1 instead of the headless-Service name of pod 0. The variables
themselves are computed by upstream's rules in `petenv.py`.

torch's rendezvous store listens on every interface, so when the kernel allows it the nodes run
in a private network namespace that has only a loopback interface.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from . import paths, proc, progress, trainenv
from .cluster.common import free_port
from .errors import UsageError, UserError, output_line
from .petenv import gpus_per_node, nproc_per_node, pet_env, quantity

# The controller's rules (pet_env and its parts) live in petenv; they stay importable from here.
__all__ = ["check_checkpoint", "failure_lines", "gpus_per_node", "launch", "launch_nodes", "nproc_per_node", "pet_env", "probe_torch",
           "quantity", "read_events", "run_smoke", "script_path"]

LOCAL_MASTER_ADDR = "127.0.0.1"
MASTER_ADDR_NOTE = ("PET_MASTER_ADDR is 127.0.0.1 on this machine; in a cluster the controller sets "
                    "<trainjob>-node-0-0.<trainjob> (pod 0 behind the JobSet's headless Service)")
STOP_GRACE_S = 10.0


class NodeSpec(TypedDict):
    """One node of a `launch` spec (the spec travels as JSON to a launcher in a network namespace)."""
    rank: int
    pet: dict[str, str]
    argv: list[str]
    env: dict[str, str]
    stdout: str
    stderr: str


# ---- running the nodes ----------------------------------------------------------------------------

def _unshare_argv() -> list[str] | None:
    """The command prefix that runs a process in a new network namespace, or None if not allowed here."""
    binary = shutil.which("unshare")
    if binary is None or not sys.platform.startswith("linux"):
        return None
    argv = [binary, "--net"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    try:
        probe = proc.run([*argv, "true"], check=False, timeout=10)
    except proc.CommandError:
        return None
    return argv if probe.returncode == 0 else None


def _loopback_up() -> None:
    """Bring up `lo` in a fresh network namespace (SIOCGIFFLAGS/SIOCSIFFLAGS, no iproute2 needed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, 0x8913, request))[1]
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH14x", b"lo", flags | 0x1))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def launch(spec: dict) -> dict:
    """Start every node, wait for all; once one fails, give the rest STOP_GRACE_S, then stop them.

    A node's environment is this process's, without any PET_* variable, plus the node's own `env`.
    Each node runs in its own process group, so stopping it also stops its torchrun workers.
    """
    if spec.get("netns"):
        _loopback_up()
    started = time.monotonic()
    procs: list[proc.Popen] = []
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("PET_") and k != "TRAINSTACK_OUTPUT_DIR"}
    for node in spec["nodes"]:
        with open(node["stdout"], "wb") as out, open(node["stderr"], "wb") as err:
            procs.append(proc.start(node["argv"], env={**inherited, **node["env"]}, cwd=spec["cwd"],
                                    stdout=out, stderr=err, stdin=proc.DEVNULL, start_new_session=True))

    def stop(node: proc.Popen) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if node.poll() is not None:
                return
            try:
                os.killpg(node.pid, sig)
            except ProcessLookupError:
                return
            try:
                node.wait(timeout=5)
            except proc.TimeoutExpired:
                pass

    previous = signal.signal(signal.SIGTERM, _interrupt)
    stopped: set[int] = set()
    first_failure: int | None = None
    failed_at: float | None = None
    timed_out = False
    try:
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            for i, node in enumerate(procs):
                if first_failure is None and node.poll() not in (None, 0):
                    first_failure, failed_at = i, now
            if now - started > spec["timeout"]:
                timed_out = True
            if timed_out or (failed_at is not None and now - failed_at > STOP_GRACE_S):
                for i, node in enumerate(procs):
                    if node.poll() is None:
                        stopped.add(i)
                        stop(node)
            time.sleep(0.1)
    except KeyboardInterrupt:
        for i, node in enumerate(procs):
            stopped.add(i)
            stop(node)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    for i, node in enumerate(procs):
        if first_failure is None and node.returncode != 0 and i not in stopped:
            first_failure = i
    return {"exit_codes": [p.returncode for p in procs], "stopped": sorted(stopped), "timed_out": timed_out,
            "first_failure": first_failure, "wall_s": round(time.monotonic() - started, 3)}


def _launch_isolated(spec: dict, workdir: Path, unshare: list[str] | None) -> dict:
    """Run `launch` here, or in a child process inside a new network namespace."""
    if unshare is None:
        return launch(spec)
    spec_path, result_path = workdir / "launch.json", workdir / "launch-result.json"
    spec_path.write_text(json.dumps({**spec, "netns": True}))
    child = proc.start([*unshare, sys.executable, "-m", "trainstack.smoke", str(spec_path), str(result_path)],
                       stdout=proc.PIPE, stderr=proc.STDOUT, start_new_session=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
                           str(paths.PACKAGE_DIR.parent), os.environ.get("PYTHONPATH")]))})
    try:
        output, _ = child.communicate(timeout=spec["timeout"] + 4 * STOP_GRACE_S)
    except (KeyboardInterrupt, proc.TimeoutExpired) as err:
        child.send_signal(signal.SIGTERM)  # the launcher stops its nodes on SIGTERM
        try:
            child.wait(timeout=3 * STOP_GRACE_S)
        except proc.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
        if isinstance(err, KeyboardInterrupt):
            raise
        raise UserError(f"the node launcher did not return within {spec['timeout']}s", f"logs: {workdir}") from err
    if child.returncode != 0 or not result_path.is_file():
        said = output_line((output or b"").decode(errors="replace"), markers=())
        raise UserError(f"the node launcher failed in its network namespace: {said}",
                        "run with --network host to skip the namespace")
    return json.loads(result_path.read_text())


def launch_nodes(spec: dict, workdir: Path) -> dict:
    """`launch` SPEC's nodes in a private network namespace (loopback only) when the kernel allows
    one, else here; their logs go to each node's stdout and stderr files."""
    return _launch_isolated(spec, workdir, _unshare_argv())


# ---- probing torch, reading results ---------------------------------------------------------------

_PROBE = ("import json, warnings; warnings.filterwarnings('ignore'); import torch, torch.distributed as d; "
          "print(json.dumps({'torch': torch.__version__, 'cuda': torch.cuda.is_available(), "
          "'gpus': torch.cuda.device_count() if torch.cuda.is_available() else 0, "
          "'gloo': d.is_available() and d.is_gloo_available(), "
          "'nccl': d.is_available() and d.is_nccl_available()}))")


def probe_torch(python: str) -> dict:
    """What torch `python` has; a clear error when it has none."""
    # a missing or unrunnable interpreter (or one past the timeout) is a CommandError naming it
    result = proc.run([python, "-c", _PROBE], check=False, timeout=300, what=f"Python interpreter {python}",
                      hint="pass --python with an interpreter that has torch")
    if result.returncode != 0:
        lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()] or ["no output"]
        if "No module named 'torch'" in result.stderr:
            raise UserError(f"torch is not installed for {python}",
                            "'make smoke-train' installs it, as does 'trainstack smoke install'")
        raise UserError(f"torch does not import in {python}: {lines[-1].strip()}",
                        "reinstall it with 'trainstack smoke install'")
    return json.loads(result.stdout.strip().splitlines()[-1])


def read_events(path: Path) -> list[dict]:
    events = []
    if path.is_file():
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return events


_NOISE = re.compile(r"^(Traceback|  File |    |\[rank\d+\]:|W\d{4} |I\d{4} |E\d{4} |\*+$|=+$|-+$|Root Cause|"
                    r"Failures:|  <NO_OTHER_FAILURES>|  time +:|  host +:|  rank +:|  exitcode +:|  error_file|"
                    r"  traceback +:|torch\.distributed\.elastic|\[\d+\]:|To enable traceback|.*warnings\.warn|"
                    r".*UserWarning|  cpu = _conversion)")


def failure_lines(node: Mapping[str, Any], count: int = 3) -> str:
    """The last lines of a node's log that say what went wrong, without torchrun's failure banner."""
    text = Path(node["stderr"]).read_text(errors="replace") + Path(node["stdout"]).read_text(errors="replace")
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    useful = [ln.strip() for ln in lines if not _NOISE.match(ln) and not ln.startswith("{")]
    chosen = useful[-count:] or [ln.strip() for ln in lines[-count:]] or ["(empty log)"]
    return " | ".join(chosen)


def check_checkpoint(python: str, checkpoint: Path) -> dict:
    """Load the checkpoint in a fresh process through the training script's own loader."""
    code = ("import json, sys, warnings; warnings.filterwarnings('ignore'); sys.path.insert(0, sys.argv[1]); "
            "import torch, train_ddp; s = train_ddp.load_checkpoint(sys.argv[2]); "
            "f = s['config']['features']; out = s['module'](torch.zeros(2, f)); "
            "print(json.dumps({'step': s['step'], 'params': sum(p.numel() for p in s['module'].parameters()), "
            "'output_shape': list(out.shape), 'optimizer_state': len(s['optimizer']['state'])}))")
    result = proc.run([python, "-c", code, str(script_path().parent), str(checkpoint)], check=False, timeout=300)
    if result.returncode != 0:
        lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()] or ["no output"]
        raise UserError(f"the checkpoint {checkpoint} does not load: {lines[-1].strip()}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def script_path() -> Path:
    return paths.repo_root() / "examples" / "train_ddp.py"


# ---- the command ----------------------------------------------------------------------------------

def _check_workdir(requested: str | None) -> None:
    """A requested folder must be new or empty, so nothing in it is overwritten."""
    if requested is None:
        return
    path = Path(requested).resolve()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise UsageError(f"--workdir {path} exists and is not an empty folder", "pass a new or empty folder")


def _workdir(requested: str | None) -> tuple[Path, bool]:
    """(folder, made_by_us): the requested folder, or a new temporary one."""
    if requested is None:
        return Path(tempfile.mkdtemp(prefix="trainstack-smoke-")), True
    path = Path(requested).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path, False


def run_smoke(args: argparse.Namespace) -> dict:
    python = args.python or sys.executable
    script = script_path()
    if not script.is_file():
        raise UserError(f"training script {script} is missing")
    found = probe_torch(python)  # before any progress line, so a missing torch is the only line printed
    if args.gpu:
        if not found["cuda"] or found["gpus"] < 1:
            raise UserError(f"--gpu: no CUDA GPU is visible to torch {found['torch']} in {python}")
        nodes, resources = 1, {"limits": {"nvidia.com/gpu": found["gpus"]}}
        nproc, backend = found["gpus"], "nccl"
    else:
        nodes, resources = args.nodes, {"requests": {"cpu": args.cpu}}
        nproc, backend = int(nproc_per_node(resources)), "gloo"
    unshare = None if args.network == "host" else _unshare_argv()
    if args.network == "namespace" and unshare is None:
        raise UserError("--network namespace: 'unshare --net' is not permitted here", "use --network host")
    port = free_port()
    workdir, made = _workdir(args.workdir)
    output_dir = workdir / "output"
    torchrun = [python, "-m", "torch.distributed.run"]  # the `torchrun` entry point, from this interpreter
    train_args = ["--steps", str(args.steps), "--seed", str(args.seed), "--output-dir", str(output_dir),
                  *args.script_args]
    local_env = {"PYTHONUNBUFFERED": "1", "GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo",
                 "PYTHONWARNINGS": "ignore:Failed to initialize NumPy"}
    spec_nodes: list[NodeSpec] = []
    for rank in range(nodes):
        pet = pet_env(args.trainjob, nodes, rank, resources, master_addr=LOCAL_MASTER_ADDR, master_port=port)
        spec_nodes.append({"rank": rank, "pet": pet, "argv": [*torchrun, str(script), *train_args],
                           "env": {**local_env, **pet},
                           "stdout": str(workdir / f"node-{rank}.stdout.log"),
                           "stderr": str(workdir / f"node-{rank}.stderr.log")})
    spec = {"nodes": spec_nodes, "cwd": str(workdir), "timeout": args.timeout}
    network = "private namespace (loopback only)" if unshare else "host (loopback addresses)"
    progress.info(f"note: {MASTER_ADDR_NOTE}")
    with progress.step(f"training: {nodes} node(s) x {nproc} process(es), {args.steps} steps, {backend}, "
                       f"network {network}"):
        outcome = _launch_isolated(spec, workdir, unshare)

    logs = f"logs: {workdir}"
    if outcome["timed_out"]:
        raise UserError(f"the training did not finish within {args.timeout}s; node 0: "
                        f"{failure_lines(spec_nodes[0])}", logs)
    if outcome["first_failure"] is not None:
        index = outcome["first_failure"]
        raise UserError(f"node {index} (torchrun, PET_NODE_RANK={index}) exited with code "
                        f"{outcome['exit_codes'][index]}: {failure_lines(spec_nodes[index])}", logs)

    events = read_events(Path(spec_nodes[0]["stdout"]))
    start = next((e for e in events if e.get("event") == "start"), None)
    done = next((e for e in events if e.get("event") == "done"), None)
    losses = [e["loss"] for e in events if e.get("event") == "step"]
    if start is None or done is None or len(losses) != args.steps:
        raise UserError(f"rank 0 logged {len(losses)} of {args.steps} steps and "
                        f"{'a' if done else 'no'} final line", logs)
    if start["world_size"] != nodes * nproc:
        raise UserError(f"rank 0 saw world size {start['world_size']}, expected {nodes * nproc}", logs)
    if not losses[-1] < losses[0]:
        raise UserError(f"the loss did not fall: {losses[0]:.4f} at step 1, {losses[-1]:.4f} at step "
                        f"{args.steps}", logs)
    with progress.step("loading the checkpoint in a fresh process"):
        loaded = check_checkpoint(python, Path(done["checkpoint"]))
    if loaded["step"] != args.steps:
        raise UserError(f"the checkpoint holds step {loaded['step']}, expected {args.steps}", logs)

    keep = args.keep or not made
    report: dict[str, Any] = {
        "ok": True, "mode": "gpu" if args.gpu else "cpu", "torch": found["torch"], "backend": start["backend"],
        "device": start["device"], "nodes": nodes, "nproc_per_node": nproc, "world_size": start["world_size"],
        "ranks": [{"node_rank": n["rank"], "exit_code": outcome["exit_codes"][n["rank"]], "pet_env": n["pet"]}
                  for n in spec_nodes],
        "steps": args.steps, "seed": args.seed, "loss_start": losses[0], "loss_end": losses[-1], "losses": losses,
        "wall_s": outcome["wall_s"], "train_s": done["train_s"], "steps_per_s": done["steps_per_s"],
        "checkpoint": {"path": done["checkpoint"] if keep else None, "step": loaded["step"],
                       "params": loaded["params"], "loads": True},
        "network": network, "master_addr_note": MASTER_ADDR_NOTE, "workdir": str(workdir) if keep else None,
    }
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return report


def _cmd_train(args: argparse.Namespace) -> int:
    if args.steps < 1 or args.nodes < 1 or args.timeout <= 0:
        raise UsageError("--steps, --nodes and --timeout must be positive")
    quantity(args.cpu, "--cpu")
    _check_workdir(args.workdir)
    report = run_smoke(args)
    if args.output == "json":
        print(json.dumps(report, indent=2, sort_keys=True))
        return 0
    progress.table(f"trainstack smoke train ({report['mode']}, torch {report['torch']})", ["", "value"], [
        ("loss at start", f"{report['loss_start']:.4f} (step 1)"),
        ("loss at end", f"{report['loss_end']:.4f} (step {report['steps']})"),
        ("wall time", f"{report['wall_s']:.1f}s (training loop {report['train_s']:.1f}s)"),
        ("steps/s", f"{report['steps_per_s']:.1f}"),
        ("ranks", (f"{report['world_size']} ({report['nodes']} node(s) x {report['nproc_per_node']} "
                   f"process(es), {report['backend']} on {report['device']})")),
        ("checkpoint", (f"step {report['checkpoint']['step']}, {report['checkpoint']['params']} parameters, "
                        "loads in a fresh process")),
    ])
    for rank in report["ranks"]:
        pet = " ".join(f"{k}={v}" for k, v in rank["pet_env"].items())
        progress.stdout.print(f"node {rank['node_rank']}: exit {rank['exit_code']}  {pet}", markup=False)
    progress.stdout.print(f"network: {report['network']}; {MASTER_ADDR_NOTE}", markup=False)
    if report["workdir"]:
        progress.stdout.print(f"logs and checkpoint: {report['workdir']}", markup=False)
    return 0


def _cmd_install(args: argparse.Namespace) -> int:
    rows = trainenv.ensure(profile=args.profile)
    progress.table("trainstack smoke install (lock: python.train)", ["package", "locked", "version", "action",
                                                                     "seconds"],
                   [(r.package, r.requirement, r.version, r.action, f"{r.seconds:.1f}") for r in rows],
                   to_stderr=True)
    return 0


def _launcher_main(argv: list[str]) -> int:
    """Entry point of the launcher child that runs inside the network namespace."""
    spec_path, result_path = Path(argv[0]), Path(argv[1])
    result = launch(json.loads(spec_path.read_text()))
    result_path.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_launcher_main(sys.argv[1:]))
