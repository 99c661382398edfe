"""kind's node image, assembled here from pinned parts where `kindest/node` cannot be pulled.

`kind build node-image` fetches images from registries, so the image is put together directly, as kind's
own `images/base` and node-image steps would:

- a Debian bookworm root filesystem by `mmdebstrap` with systemd and the packages kind's base image
  installs (bookworm: systemd 252 still runs on a cgroup v1 host; kind's own base moved to trixie, whose
  systemd refuses it), the lock's runc and CNI plugins among them;
- kind's base files (`images/base/files`: the entrypoint, the kubelet and containerd units) read from the
  pinned kind module zip, checksum-verified by the Go module proxy;
- the lock's kubelet, kubeadm and kubectl (`/usr/bin`) and containerd, its shim and ctr
  (`/usr/local/bin`), `/kind/version`;
- this project's containerd configuration: images from the cluster's mirror (`certs.d`, the registry in
  the engine's namespace, at the kind network's gateway), `restrict_oom_score_adj` (no CAP_SYS_RESOURCE
  here), the Debian CNI plugins; no kindnetd (not obtainable: the provider writes each node's CNI
  configuration and routes);
- a shield run before kind's entrypoint: a privileged node sees the host's global sysctls, which kubelet
  and systemd would write (kubelet's kernel tunables, systemd's fs.file-max and fs.nr_open). Each is
  bind-mounted over, inside the node's mount namespace, by a file holding the value the writer wants
  (kubelet's) or the value the host has (the rest), so nothing reaches the host. systemd-sysctl's vendor
  files (/usr/lib/sysctl.d: fs.protected_* are global) are left out; kind's own (/etc/sysctl.d) are per
  network namespace and stay.

The image is imported into the private engine (`docker import`) under a tag that carries the hash of its
inputs, so a warm run imports nothing.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

from .. import imagelayers, images, paths, proc, progress, tools
from .. import lock as lockmod
from ..errors import UserError
from .node import KUBELET_TUNING, MIRROR, REGISTRY_PORT
from .sandbox import KUBELET_SYSCTLS

SUITE = "bookworm"
REPOSITORY = "trainstack/kind-node"
# What kind's images/base installs (its Dockerfile), less what only rootless, NFS and iSCSI users need.
PACKAGES = ("systemd", "conntrack", "iptables", "nftables", "iproute2", "ethtool", "util-linux", "mount", "kmod",
            "libseccomp2", "e2fsprogs", "bash", "ca-certificates", "procps", "runc", "containernetworking-plugins")
# Debian packages whose versions the lock pins (debian: the real node's), pinned here too.
PINNED = ("runc", "containernetworking-plugins", "iptables", "conntrack")
K8S_BINARIES = {"kubelet": "/usr/bin/kubelet", "kubeadm": "/usr/bin/kubeadm", "kubectl": "/usr/bin/kubectl"}
RUNTIME_BINARIES = {"containerd": "/usr/local/bin/containerd",
                    "containerd-shim-runc-v2": "/usr/local/bin/containerd-shim-runc-v2",
                    "ctr": "/usr/local/bin/ctr"}
# Global sysctls a node would otherwise write on the host, beside kubelet's (sandbox.KUBELET_SYSCTLS):
# systemd as PID 1 raises these two at boot.
HOST_SYSCTLS = ("fs/file-max", "fs/nr_open")
CNI_BIN = "/usr/lib/cni"
ENTRYPOINT = ["/kind/bin/trainstack-shield", "/usr/local/bin/entrypoint", "/sbin/init"]
# kind's network in the engine: one bridge, no masquerade (nothing leaves the namespace), this subnet.
NETWORK = "kind"
SUBNET = "172.30.0.0/24"
GATEWAY = "172.30.0.1"


def shield_script() -> str:
    """The entrypoint wrapper: bind a file over each host-global sysctl, then exec kind's entrypoint."""
    lines = ["#!/bin/sh", "# trainstack: keep this privileged node's sysctl writes off the host (see kindnode.py)",
             "set -e", "dir=${TRAINSTACK_SHIELD_DIR:-/run/trainstack-sysctl}", "mkdir -p $dir", "shield() {",
             '  [ -e "/proc/sys/$1" ] || return 0', '  f="$dir/$(echo "$1" | tr / _)"',
             '  if [ -n "$2" ]; then printf "%s\\n" "$2" > "$f"; else cat "/proc/sys/$1" > "$f"; fi',
             '  mount --bind "$f" "/proc/sys/$1"', "}"]
    lines += [f"shield {path} {value}" for path, value in KUBELET_SYSCTLS.items()]
    lines += [f"shield {path}" for path in HOST_SYSCTLS]
    lines += ['exec "$@"', ""]
    return "\n".join(lines)


def containerd_config(lock: lockmod.Lock) -> str:
    pause = images.reference("pause", lock)
    return f"""# trainstack: the kind node's containerd (kindnode.py)
version = 3
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{pause}"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "/etc/containerd/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  tolerate_missing_hugepages_controller = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{CNI_BIN}"]
    conf_dir = "/etc/cni/net.d"
"""


def mirror_hosts() -> str:
    server = f"http://{GATEWAY}:{REGISTRY_PORT}"
    return f'server = "{server}"\n\n[host."{server}"]\n  capabilities = ["pull", "resolve"]\n'


def cni_config(pod_cidr: str) -> str:
    """A node's CNI configuration: a bridge with the node's pod subnet (what kindnetd writes)."""
    return json.dumps({
        "cniVersion": "1.0.0", "name": "trainstack",
        "plugins": [
            {"type": "bridge", "bridge": "ts0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=2)


def _kind_files(lock: lockmod.Lock) -> dict[str, tuple[bytes, int]]:
    """kind's images/base/files from the pinned kind module zip: image path -> (content, mode)."""
    tool = lock.tool("kind")
    zip_path = Path(tools.module_info(tool.module, tool.version)["Zip"])
    prefix = f"{tool.module}@{tool.version}/images/base/files/"
    out: dict[str, tuple[bytes, int]] = {}
    with zipfile.ZipFile(zip_path) as archive:
        for name in archive.namelist():
            if not name.startswith(prefix) or name.endswith("/"):
                continue
            rel = name[len(prefix):]
            if rel.startswith("LICENSES/") or rel == "etc/containerd/config.toml":
                continue  # (the node's containerd configuration is this project's)
            executable = rel.startswith(("usr/local/bin/", "kind/bin/"))
            out["/" + rel] = (archive.read(name), 0o755 if executable else 0o644)
    if "/usr/local/bin/entrypoint" not in out:
        raise UserError(f"{zip_path}: kind's images/base/files/usr/local/bin/entrypoint is missing")
    return out


def _debian_versions(lock: lockmod.Lock) -> dict[str, str]:
    pinned = lock.get("debian")
    return {name: str(pinned[name]) for name in PINNED if isinstance(pinned, dict) and name in pinned}


def inputs(lock: lockmod.Lock) -> tuple[str, dict[str, Path], dict[str, tuple[bytes, int]]]:
    """(key, binaries by image path, files by image path): everything the image is made of."""
    binaries = {target: tools.require(name, lock) for name, target in {**K8S_BINARIES, **RUNTIME_BINARIES}.items()}
    files = _kind_files(lock)
    files["/kind/bin/trainstack-shield"] = (shield_script().encode(), 0o755)
    files["/etc/containerd/config.toml"] = (containerd_config(lock).encode(), 0o644)
    files[f"/etc/containerd/certs.d/{MIRROR}/hosts.toml"] = (mirror_hosts().encode(), 0o644)
    files["/kind/version"] = (f"{lock.kubernetes_version}\n".encode(), 0o644)
    digest = hashlib.sha256()
    digest.update(json.dumps([SUITE, PACKAGES, _debian_versions(lock), ENTRYPOINT, CUSTOMIZE, ENABLE]).encode())
    digest.update(images._apt_sources().read_bytes())
    for target, path in sorted(binaries.items()):
        digest.update(f"{target} {imagelayers.sha256_file(path)}".encode())
    for target, (content, mode) in sorted(files.items()):
        digest.update(f"{target} {mode} ".encode() + hashlib.sha256(content).digest())
    return digest.hexdigest()[:12], binaries, files


def tag(lock: lockmod.Lock) -> str:
    key, _, _ = inputs(lock)
    return f"{REPOSITORY}:{lock.kubernetes_version}-{key}"


# Hooks run in mmdebstrap's customize phase ("$1" is the root): kind's base image steps (its Dockerfile).
CUSTOMIZE = [
    'find "$1/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete',
    'rm -f "$1"/lib/systemd/system/multi-user.target.wants/* "$1"/etc/systemd/system/*.wants/*',
    'rm -f "$1"/lib/systemd/system/local-fs.target.wants/* "$1"/lib/systemd/system/sockets.target.wants/*udev*',
    'rm -f "$1"/lib/systemd/system/sockets.target.wants/*initctl* "$1"/lib/systemd/system/basic.target.wants/*',
    'echo ReadKMsg=no >> "$1/etc/systemd/journald.conf"',
    'ln -sf /usr/lib/systemd/systemd "$1/sbin/init"',
    'rm -f "$1"/usr/lib/sysctl.d/*.conf',  # systemd's and procps' vendor sysctls: fs.protected_* are global
    'mkdir -p "$1/etc/kubernetes/manifests" "$1/opt/cni" "$1/etc/cni/net.d"',
    f'ln -sf {CNI_BIN} "$1/opt/cni/bin"',
]
ENABLE = ['chroot "$1" systemctl enable kubelet.service containerd.service undo-mount-hacks.service',
          'chroot "$1" systemctl mask systemd-binfmt.service']


def build_tar(lock: lockmod.Lock) -> Path:
    """The node image's root filesystem as one tar in the cache (built once per input key)."""
    key, binaries, files = inputs(lock)
    out = paths.cache_dir() / "kind" / f"node-{key}.tar"
    if out.is_file():
        return out
    if not shutil.which("mmdebstrap"):
        raise UserError("assembling kind's node image needs mmdebstrap", "run 'trainstack node prereqs'")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f"node-{key}.files"
    shutil.rmtree(staging, ignore_errors=True)
    for target, path in binaries.items():
        dest = staging / target.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
        dest.chmod(0o755)
    for target, (content, mode) in files.items():
        dest = staging / target.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(content)
        dest.chmod(mode)
    versions = _debian_versions(lock)
    include = [f"{p}={versions[p]}" if p in versions else p for p in PACKAGES]
    tmp = out.with_suffix(".tmp")
    cmd = ["mmdebstrap", "--quiet", "--variant=minbase", f"--include={','.join(include)}",
           "--dpkgopt=path-exclude=/usr/share/doc/*", "--dpkgopt=path-exclude=/usr/share/man/*",
           "--dpkgopt=path-exclude=/usr/share/locale/*",
           *(f"--customize-hook={hook}" for hook in CUSTOMIZE),
           f"--customize-hook=sync-in {staging} /",
           *(f"--customize-hook={hook}" for hook in ENABLE),
           "--format=tar", SUITE, str(tmp), str(images._apt_sources())]
    with progress.step(f"assembling kind's node image (mmdebstrap {SUITE} + kind's base files + the lock's "
                       f"kubelet, kubeadm, containerd)"):
        result = proc.run(cmd, check=False, timeout=1800)
        if result.returncode != 0:
            raise UserError(f"mmdebstrap (kind node image) failed: {(result.stderr or result.stdout).strip()[-400:]}")
        tmp.rename(out)
    shutil.rmtree(staging, ignore_errors=True)
    for old in out.parent.glob("node-*.tar"):
        if old != out:
            old.unlink()
    return out


def ensure(engine, lock: lockmod.Lock) -> str:  # engine: cluster.engine.Engine
    """The node image in ENGINE (imported from build_tar once per input key); returns its reference."""
    ref = tag(lock)
    if engine.docker("image", "inspect", ref, check=False, timeout=30).returncode == 0:
        return ref
    tar = build_tar(lock)
    # (docker import takes no STOPSIGNAL: kind deletes its nodes with `docker rm -f`, which needs none)
    changes = [f"ENTRYPOINT {json.dumps(ENTRYPOINT)}", "ENV container=docker"]
    with progress.step(f"importing {ref} into the engine"):
        engine.docker("import", *(a for c in changes for a in ("--change", c)), str(tar), ref, timeout=900)
    return ref


def kubeadm_patches(lock: lockmod.Lock) -> list[str]:
    """kind's kubeadmConfigPatches for this host and the mirror's images."""
    repo = f"{MIRROR}/trainstack"
    etcd = lock.tool("etcd").version
    coredns_repo, coredns_tag = images.repository_tag("coredns", lock)
    cluster = (
        "kind: ClusterConfiguration\n"
        f"imageRepository: {repo}\n"
        f"etcd:\n  local:\n    imageRepository: {repo}\n    imageTag: {etcd}\n"
        f"dns:\n  imageRepository: {MIRROR}/{coredns_repo.rsplit('/', 1)[0]}\n  imageTag: {coredns_tag}\n"
    )
    return [
        cluster,
        "kind: KubeletConfiguration\nfailCgroupV1: false\n"
        + "".join(f"{k}: {json.dumps(v)}\n" for k, v in KUBELET_TUNING.items()),
    ]
