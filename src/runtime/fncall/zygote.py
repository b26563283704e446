# warren fncall runner: dispatcher + zygote + per-call workers. Runs inside a runner sandbox
# (a container sandbox made for fncall), started by the node as one long command whose stdin
# and stdout are the node's channel. Standard library only: the runner image brings python3.
#
# Processes (see docs/design.md, "fncall"):
#   dispatcher  holds the channel and every call's data; never forks a worker itself.
#   zygote      forked from the dispatcher before any call data exists and never sees any:
#               it only clones workers, so no call can find an earlier call in memory. Its
#               loop and W's set-up run in C (zygote_lib.c, warren-zygote.so from the node):
#               zygote_main calls into it and it returns only in each new W. The Python loop
#               below (zygote_main's and worker_main's) runs where that library cannot load.
#   W (worker)  for Python code: cloned by the zygote into fresh mount, pid, ipc and uts
#               namespaces and a net namespace that is new or left as new by an earlier call
#               (zygote_lib.c; the Python loop always makes a new one), pid 1 there: mounts a
#               new /proc, a fresh tmpfs on /tmp (the call's directory) and /dev/shm, makes / read-only, brings lo up; then drops to the
#               call's own uid (no capabilities), no_new_privs, Landlock (writes only in its
#               tmpfs), seccomp (the node's call filter, stacked on the runner's), and waits
#               for its request; the code runs in W itself, from the warm interpreter (one fork
#               per call: on this kind of host every page a forked Python touches is a costly
#               fault). W's end ends every process of the call and its namespaces.
#   native      for programs that are exec'd (C, C++, shell): `warren-agent --call-worker`,
#               posix_spawn'd by the dispatcher (vfork: nothing of a Python is copied); it
#               makes the same namespaces, mounts, uid, Landlock and seccomp in C++, runs the
#               program as pid 2 and reports its status, usage and the files asked for.
# Workers are made ahead of time (`prefork`), so a call only pays for writing its request.
#
# Channel frames (both directions): u32 LE length of the rest, u32 LE header length, JSON
# header, payload bytes.
import atexit
import builtins
import ctypes
import errno
import gc
import io
import fcntl
import json
import marshal
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
import types

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
SYS_CLONE, SYS_CLOSE_RANGE = 56, 436
SYS_LANDLOCK_CREATE, SYS_LANDLOCK_ADD, SYS_LANDLOCK_RESTRICT = 444, 445, 446
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
CLK_TCK = os.sysconf("SC_CLK_TCK")

_libc = ctypes.CDLL(None, use_errno=True)
# The GIL stays held across clone: the child must come out of it in the state we went in.
_pylibc = ctypes.PyDLL(None, use_errno=True)
_clone = _pylibc.syscall
_clone.restype = ctypes.c_long
_clone.argtypes = [ctypes.c_long, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_ulong]
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]
_libc.syscall.restype = ctypes.c_long
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                        ctypes.c_ulong]


def _check(rc, what):
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return rc


def mount(src, target, fstype, flags, data=None):
    enc = lambda s: s.encode() if s is not None else None
    _check(_libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def frame(header, payload=b""):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<II", 4 + len(h) + len(payload), len(h)) + h + payload


def write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_exact(fd, n):
    first = os.read(fd, n)  # mostly whole: a worker then pays for no buffer and no loop
    if len(first) == n:
        return first
    if not first and n:
        raise EOFError("channel closed")
    out = bytearray(first)
    while len(out) < n:
        b = os.read(fd, n - len(out))
        if not b:
            raise EOFError("channel closed")
        out += b
    return bytes(out)


def read_frame(fd):
    total, hlen = struct.unpack("<II", read_exact(fd, 8))
    body = read_exact(fd, total - 4)
    return json.loads(body[:hlen]), body[hlen:]


# ---------------------------------------------------------------------------------------------
# W: the call's pid 1.

def landlock(tmp_dirs):
    """Read and execute everywhere; write only in the call's own tmpfs; no signals or abstract
    sockets across the call's boundary (ABI 6+)."""
    abi = _libc.syscall(SYS_LANDLOCK_CREATE, None, 0, 1)
    if abi <= 0:
        return 0
    ex, wf, rf, rd = 1 << 0, 1 << 1, 1 << 2, 1 << 3
    fs = (1 << 13) - 1  # execute .. make_sym
    if abi >= 2:
        fs |= 1 << 13   # refer
    if abi >= 3:
        fs |= 1 << 14   # truncate
    if abi >= 5:
        fs |= 1 << 15   # ioctl on devices
    scoped = 3 if abi >= 6 else 0
    size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
    attr = struct.pack("<QQQ", fs, 0, scoped)[:size]
    rs = _check(_libc.syscall(SYS_LANDLOCK_CREATE, attr, size, 0), "landlock_create_ruleset")

    def allow(path, access):
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            rule = struct.pack("<Qi", access & fs, fd)
            _check(_libc.syscall(SYS_LANDLOCK_ADD, rs, 1, rule, 0), f"landlock_add_rule {path}")
        finally:
            os.close(fd)

    allow("/", ex | rf | rd)
    allow("/dev", rf | wf | (1 << 15))  # /dev/null, /dev/zero, /dev/tty...: no new nodes
    make = fs & ~((1 << 6) | (1 << 11) | (1 << 15))  # everything but device nodes
    for d in tmp_dirs:
        allow(d, make)
    _check(_libc.syscall(SYS_LANDLOCK_RESTRICT, rs, 0), "landlock_restrict_self")
    os.close(rs)
    return abi


def seccomp(bpf):
    if not bpf:
        return
    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = struct.pack("<HxxxxxxQ", len(bpf) // 8, ctypes.addressof(buf))
    pbuf = ctypes.create_string_buffer(prog, len(prog))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, pbuf, 0, 0), "seccomp")


def set_limits(lim):
    def cap(kind, value):
        value = int(value)
        soft, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(kind, (value, value))

    if lim.get("cpu_s"):
        s = int(lim["cpu_s"])
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        soft_hard = (s, s + 1) if hard == resource.RLIM_INFINITY else (min(s, hard), hard)
        resource.setrlimit(resource.RLIMIT_CPU, soft_hard)
    if lim.get("as_bytes"):
        # The interpreter's own mappings do not count against the program: the worker is a
        # fork of the warm interpreter, which the code found already there.
        base = lim.get("as_base", 0)
        cap(resource.RLIMIT_AS, lim["as_bytes"] + base)
    if lim.get("stack_bytes"):
        cap(resource.RLIMIT_STACK, lim["stack_bytes"])
    if lim.get("fsize_bytes"):
        cap(resource.RLIMIT_FSIZE, lim["fsize_bytes"])
    if lim.get("nproc"):
        cap(resource.RLIMIT_NPROC, lim["nproc"])
    if lim.get("nofile"):
        cap(resource.RLIMIT_NOFILE, lim["nofile"])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def read_proc(path):
    """A /proc file's text, without file objects (fewer pages in a worker)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def vm_size():
    return int(read_proc("/proc/self/statm").split()[0]) * os.sysconf("SC_PAGE_SIZE")


def prepare_python():
    """In the zygote, before any worker: what every Python run needs and no request decides,
    the streams over fds 0-2 (a worker's own pipes by the time it runs) and a __main__ module.
    Every page a worker writes is a copy of the zygote's (a fault of ~3.7 us here): made in
    each worker, these cost it ~160 of them. They are made while fds 0-2 are a pipe, so that
    what they learn of their file at creation (not seekable, no position) is what a worker's
    pipes are. The zygote never writes to them: each worker finds them empty."""
    r, w = os.pipe()
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    try:
        os.dup2(r, 0)
        os.dup2(w, 1)
        os.dup2(w, 2)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                     encoding="utf-8", errors="surrogateescape")
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
                                      encoding="utf-8", errors="surrogateescape")
        sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
                                      encoding="utf-8", errors="backslashreplace", line_buffering=True)
        sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr
    finally:
        for fd, old in zip((0, 1, 2), saved):
            os.dup2(old, fd)
            os.close(old)
        os.close(r)
        os.close(w)
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    # The runner's python3 runs with -I, which ignores PYTHON* variables: a call's are its own.
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    return main


def run_python(main, code, args, filename):
    sys.argv = [filename] + list(args)
    sys.path[0:0] = [os.path.dirname(filename)]
    main.__file__ = filename
    status = 0
    try:
        exec(compile(code, filename, "exec"), main.__dict__)
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException as e:
        tb = e.__traceback__.tb_next if e.__traceback__ else None  # not our own frame
        traceback.print_exception(type(e), e, tb)
        status = 1
    try:
        atexit._run_exitfuncs()
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            status = status or 120
    # The streams the program started with, if it replaced them: python3 writes out what they
    # hold too (as it tears them down).
    for stream in (sys.__stdout__, sys.__stderr__):
        if stream is not sys.stdout and stream is not sys.stderr:
            try:
                stream.flush()
            except BaseException:
                pass
    # Our own report, so the result need not wait for this process's teardown. The program
    # could have spoiled fd 4: then the zygote's report of our end counts instead.
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    try:
        os.close(0)
        os.close(1)
        os.close(2)
        report = b'{"exit_code":%d,"signal":0,"cpu_ms":%d,"maxrss_kb":%d}' % (
            status, int(cpu * 1000), max(me.ru_maxrss, kids.ru_maxrss))  # not json: fewer pages
        write_all(4, struct.pack("<II", 4 + len(report), len(report)) + report)
        os.close(4)
    except OSError:
        pass
    os._exit(status)


# /dev/null over what a fresh /proc still shows an unprivileged reader and a call must not see:
# as isolation::kCallProcMasks (proc_masks.h), which says why these.
PROC_MASKS = ("/proc/interrupts", "/proc/softirqs", "/proc/config.gz", "/proc/kallsyms",
              "/proc/sched_debug", "/proc/latency_stats")


def lo_up():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, ifr)[:18])[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))
    finally:
        s.close()


def worker_setup(req, cfg):
    """As root of the runner: the call's own mounts, hostname and loopback."""
    uid = req["uid"]
    if cfg["make_private"]:
        mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for path in PROC_MASKS:
        try:
            mount("/dev/null", path, None, MS_BIND)
        except OSError as e:
            if e.errno != errno.ENOENT or os.path.exists(path):  # absent: nothing to hide
                raise
    tmp_opts = f"size={cfg['tmp_bytes']},mode=0700,uid={uid},gid={uid}"
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp_opts)
    if cfg["has_shm"]:
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, tmp_opts)
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | cfg["root_flags"])
    os.chdir("/tmp")  # as zygote_lib.c: a call's usual cwd costs its worker nothing
    socket.sethostname("sandbox")
    lo_up()


def worker_main(fds, req, cfg, bpf, main):
    """W: pid 1 of the call's fresh namespaces. Sets them up, becomes the call's uid, waits for
    the request, then runs its Python code itself."""
    req_r, stdin_r, stdout_w, stderr_w, status_w = fds
    uid = req["uid"]
    try:
        worker_setup(req, cfg)
    except OSError as e:
        write_all(status_w, frame({"error": f"worker setup: {e}"}))
        os._exit(1)
    os.dup2(stdin_r, 0)
    os.dup2(stdout_w, 1)
    os.dup2(stderr_w, 2)
    os.dup2(req_r, 3)
    os.dup2(status_w, 4)
    _libc.syscall(SYS_CLOSE_RANGE, 5, 0xFFFFFFFF, 0)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # every capability goes with root
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0), "no_new_privs")
    landlock(["/tmp", "/dev/shm"])
    seccomp(bpf)
    worker_run(main)


def worker_run(main):
    """W, set up (cwd /tmp): waits for its request and runs its Python code itself. The request
    is a marshal'd dict from the dispatcher (Dispatcher.start): cheaper to read than JSON."""
    try:
        req = marshal.loads(read_exact(3, int.from_bytes(read_exact(3, 4), "little")))
    except EOFError:
        os._exit(0)  # the runner is going away
    os.close(3)
    if "files" in req:
        data, pos = req.pop("data"), 0
        for f in req["files"]:
            fd = os.open(os.path.join("/tmp", f["name"]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                         f.get("mode", 0o644))
            write_all(fd, data[pos:pos + f["len"]])
            pos += f["len"]
            os.close(fd)
        del data
    cwd = req.get("cwd") or "/tmp"
    if cwd != "/tmp":
        try:
            os.chdir(cwd)
        except OSError as e:
            os.write(2, f"warren: chdir {cwd}: {e.strerror}\n".encode())
            write_all(4, frame({"exit_code": 126, "signal": 0, "cpu_ms": 0, "maxrss_kb": 0}))
            os._exit(126)
    if "env" in req:  # absent: the call's environment is the one the zygote has
        os.environ.clear()
        os.environ.update(req["env"])
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    lim = dict(req.get("limits", {}))
    if req.get("mode") == "python":
        lim["as_base"] = vm_size()
        set_limits(lim)
        gc.enable()
        run_python(main, req["code"], req.get("args", []), "/tmp/" + req.get("filename", "main.py"))
    # Programs that are exec'd run in native workers (warren-agent --call-worker), not here.
    write_all(4, frame({"error": "worker setup: a Python worker got a program to exec"}))
    os._exit(1)


# ---------------------------------------------------------------------------------------------
# The zygote: clones workers on request and reports their end; holds nothing of any call.

def zygote_main(sock, cfg, bpf, lib_fd):
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)  # the channel stays with the dispatcher alone
    os.dup2(null, 1)
    os.close(null)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, None, 0, 0)
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS
    # Children start with everything frozen: their collector never walks (and so never
    # copies) the pages of the objects they inherit.
    main = prepare_python()
    gc.disable()
    gc.collect()
    _libc.malloc_trim(0)  # free heap pages go back: a clone would map and unmap them too
    gc.freeze()
    serve = None
    if lib_fd >= 0:
        try:
            lib = ctypes.PyDLL(f"/proc/self/fd/{lib_fd}")
            serve = lib.warren_zygote
            serve.restype = ctypes.c_int
            serve.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_ulonglong,
                              ctypes.c_uint, ctypes.c_ulong]
            why = ""
        except (OSError, AttributeError) as e:
            why = f"warren-zygote.so: {e}"
        os.close(lib_fd)
    else:
        why = "no warren-zygote.so"
    sock.send(json.dumps({"zygote": "native" if serve else "python", "why": why}).encode())
    if serve:
        # The loop runs in C and never comes back here in the zygote; it returns only in a
        # new worker, set up as worker_main would (see zygote_lib.c).
        serve(sock.fileno(), bpf, len(bpf), cfg["tmp_bytes"], cfg["setup_flags"], cfg["root_flags"])
        sock.detach()  # closed by the set-up: never close whatever takes its number later
        worker_run(main)
        os._exit(122)
    sock.setblocking(False)
    rfd, wfd = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(sock.fileno(), selectors.EVENT_READ, "sock")
    sel.register(rfd, selectors.EVENT_READ, "chld")
    while True:
        for key, _ in sel.select():
            if key.data == "chld":
                try:
                    os.read(rfd, 4096)
                except BlockingIOError:
                    pass
                while True:
                    try:
                        pid, status, ru = os.wait4(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    rep = {"exited": pid,
                           "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1,
                           "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
                           "cpu_ms": int((ru.ru_utime + ru.ru_stime) * 1000),
                           "maxrss_kb": ru.ru_maxrss}
                    sock.setblocking(True)
                    sock.send(json.dumps(rep).encode())
                    sock.setblocking(False)
                continue
            try:
                msg, fds, _, _ = socket.recv_fds(sock, 4096, 8)
            except BlockingIOError:
                continue
            except OSError:
                os._exit(0)  # the dispatcher is gone
            if not msg:
                os._exit(0)
            req = json.loads(msg)
            if "netns" in req or "netns_back" in req:
                # Net namespaces for native workers are the C zygote's: without it they make
                # their own.
                for fd in fds:
                    os.close(fd)
                if "netns" in req:
                    sock.setblocking(True)
                    sock.send(b'{"netns":0}')
                    sock.setblocking(False)
                continue
            pid = _clone(SYS_CLONE, flags | signal.SIGCHLD, None, None, None, 0)
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                worker_main(fds, req, cfg, bpf, main)
                os._exit(122)
            err = ctypes.get_errno()
            for fd in fds:
                os.close(fd)
            sock.setblocking(True)
            if pid < 0:
                sock.send(json.dumps({"error": f"clone: {os.strerror(err)}"}).encode())
            else:
                pidfd = os.pidfd_open(pid)
                socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [pidfd])
                os.close(pidfd)
            sock.setblocking(False)


# ---------------------------------------------------------------------------------------------
# The dispatcher.

class Worker:
    def __init__(self, uid, fds, kind="py"):
        # Our ends of its request, stdin, stdout, stderr and status pipes.
        self.kind = kind  # "py": cloned by the zygote; "native": warren-agent --call-worker
        self.uid = uid
        self.req_w, self.stdin_w, self.out_r, self.err_r, self.status_r = fds
        self.pid = 0
        self.pidfd = -1
        self.netns = -1  # a native worker's net namespace, from the zygote, until its end
        self.run = None
        self.exit = None  # the zygote's report of W's end
        self.finished = False  # its run's result was sent; waiting only for its end


class Run:
    def __init__(self, header, payload):
        self.id = header["id"]
        self.header = header
        self.payload = payload
        self.python = header.get("mode") == "python"
        self.out = [bytearray(), bytearray()]
        self.truncated = [False, False]
        self.status = bytearray()
        self.open = set()
        self.deadline = 0.0
        self.start = 0.0
        self.timed_out = False
        self.output_limit = False
        self.killed_at = None
        self.stdin = b""


class Dispatcher:
    def __init__(self, cfg, zsock, bpf=b"", worker_fd=-1):
        self.cfg = cfg
        self.zsock = zsock
        self.env = dict(os.environ)  # the zygote's too: it was forked from here
        self.sel = selectors.DefaultSelector()
        self.ready = {"py": [], "native": []}  # workers set up and waiting for a call
        self.forking = []      # requests sent to the zygote, answered in order: a Worker for a
                               # fork, "netns" for a net namespace for native workers
        self.netns = []        # those net namespaces (fds), each for one native worker
        self.netns_ok = True   # the zygote has them to give
        self.by_pid = {}       # W's pid -> worker, until the zygote reports its end
        self.queue = []        # runs waiting for a worker
        self.fd_owner = {}     # fd -> (worker, what)
        self.free_uids = list(range(cfg["uid_base"], cfg["uid_base"] + cfg["max_workers"] * 2))
        self.live = 0          # workers forked whose end has not been reported
        self.inbuf = bytearray()
        self.out_pending = bytearray()
        os.set_blocking(0, False)
        self.sel.register(0, selectors.EVENT_READ, "channel")
        self.sel.register(zsock.fileno(), selectors.EVENT_READ, "zygote")
        # Exec'd programs run in native workers when the node sent the worker binary.
        self.native = None
        if worker_fd >= 0:
            bfd = high_fd(os.memfd_create("warren-call-seccomp", os.MFD_CLOEXEC))
            write_all(bfd, bpf)  # workers pread it: the shared offset does not matter
            self.native = (f"/proc/self/fd/{worker_fd}", bfd,
                           [str(cfg["tmp_bytes"]), str(cfg["setup_flags"]), str(cfg["root_flags"])])

    def send(self, header, payload=b""):
        self.out_pending += frame(header, payload)
        while self.out_pending:
            n = os.write(1, self.out_pending)
            del self.out_pending[:n]

    def fork_worker(self):
        uid = self.free_uids.pop(0)
        theirs, ours = [], []
        for direction in ("req", "stdin", "out", "err", "status"):
            r, w = os.pipe2(os.O_CLOEXEC)
            if direction in ("req", "stdin"):
                theirs.append(r), ours.append(w)
            else:
                theirs.append(w), ours.append(r)
        socket.send_fds(self.zsock, [json.dumps({"uid": uid}).encode()], theirs)
        for fd in theirs:
            os.close(fd)
        self.forking.append(Worker(uid, ours))
        self.live += 1

    def spawn_native(self):
        """A native worker: posix_spawn (vfork: nothing of this process is copied) of
        `warren-agent --call-worker`, which makes the call's namespaces itself."""
        path, bpf_fd, args = self.native
        uid = self.free_uids.pop(0)
        netns = self.netns.pop() if self.netns else -1
        theirs, ours = [], []
        for direction in ("req", "stdin", "out", "err", "status"):
            r, w = (high_fd(fd) for fd in os.pipe2(os.O_CLOEXEC))
            if direction in ("req", "stdin"):
                theirs.append(r), ours.append(w)
            else:
                theirs.append(w), ours.append(r)
        req_r, stdin_r, out_w, err_w, status_w = theirs
        actions = [(os.POSIX_SPAWN_DUP2, stdin_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                   (os.POSIX_SPAWN_DUP2, err_w, 2), (os.POSIX_SPAWN_DUP2, req_r, 3),
                   (os.POSIX_SPAWN_DUP2, status_w, 4), (os.POSIX_SPAWN_DUP2, bpf_fd, 5)]
        if netns >= 0:
            actions.append((os.POSIX_SPAWN_DUP2, netns, 6))
        w = Worker(uid, ours, "native")
        w.netns = netns
        try:
            w.pid = os.posix_spawn(path, [path, "--call-worker", str(uid)] + args + [str(6 if netns >= 0 else -1)], {},
                                   file_actions=actions,
                                   setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGUSR1))
            w.pidfd = os.pidfd_open(w.pid)
        except OSError as e:
            for fd in theirs + ours:
                os.close(fd)
            if netns >= 0:
                self.netns.append(netns)
            self.free_uids.append(uid)
            self.send({"t": "log", "error": f"native worker: {e}", "damaged": True})
            return
        for fd in theirs:
            os.close(fd)
        self.live += 1
        self.by_pid[w.pid] = w
        self.fd_owner[w.pidfd] = (w, "native-exit")
        self.sel.register(w.pidfd, selectors.EVENT_READ, "worker")
        self.ready["native"].append(w)

    def kind_of(self, run):
        return "py" if run.python else "native"

    def top_up(self):
        prefork = self.cfg["prefork"]
        for kind in ("py", "native"):
            if kind == "native" and not self.native:
                continue
            queued = sum(1 for r in self.queue if self.kind_of(r) == kind)
            forking = len(self.forking) - self.forking.count("netns") if kind == "py" else 0
            while (len(self.ready[kind]) + forking < prefork + queued and self.free_uids
                   and self.live < self.cfg["max_workers"] + 2 * prefork):
                if kind == "py":
                    self.fork_worker()
                    forking += 1
                else:
                    before = self.live
                    self.spawn_native()
                    if self.live == before:
                        break
        # Net namespaces for the next native workers, ahead as they are: one an earlier call
        # left as new, or new (making one is the largest single cost of a run).
        if self.native and self.netns_ok:
            pending = self.forking.count("netns")
            while len(self.netns) + pending < prefork:
                self.zsock.send(b'{"netns":1}')
                self.forking.append("netns")
                pending += 1

    def on_zygote(self):
        try:
            msg, fds, _, _ = socket.recv_fds(self.zsock, 4096, 1)
        except BlockingIOError:
            return
        if not msg:
            raise SystemExit("zygote ended")
        rep = json.loads(msg)
        if "exited" in rep:
            w = self.by_pid.pop(rep["exited"], None)
            if w is None:
                return
            w.exit = rep
            self.on_worker_end(w)
            return
        w = self.forking.pop(0)
        if w == "netns":
            if fds and rep.get("netns"):
                self.netns.append(high_fd(fds[0]))
            else:
                self.netns_ok = False  # the Python zygote: native workers make their own
            return
        if "error" in rep:
            self.discard(w)
            self.send({"t": "log", "error": rep["error"], "damaged": True})
            return
        w.pid, w.pidfd = rep["pid"], fds[0]
        self.by_pid[w.pid] = w
        self.ready["py"].append(w)
        self.drain_queue()

    def on_worker_end(self, w):
        if w.finished:  # its result went out at its report; now it is gone
            self.discard(w)
        elif w.run is None:  # died before any call: its set-up failed
            self.ready[w.kind] = [r for r in self.ready[w.kind] if r is not w]
            err = self.read_setup_error(w)
            self.discard(w)
            self.send({"t": "log", "error": err, "damaged": True})
        else:
            w.run.open.discard("exit")
            self.maybe_finish(w)
        # Its end may free the last slot (`live`) a queued run was waiting for: with no other
        # event to come (one client, waiting on that run), nothing else would fork for it.
        self.drain_queue()

    def read_setup_error(self, w):
        try:
            os.set_blocking(w.status_r, False)
            h, _ = json.loads(os.read(w.status_r, 65536)[8:] or b"{}"), None
            return h.get("error", "worker ended before its call")
        except (OSError, ValueError):
            return "worker ended before its call"

    def discard(self, w):
        if w.netns >= 0:  # the call is over: the zygote keeps it if the call left it as new
            socket.send_fds(self.zsock, [b'{"netns_back":1}'], [w.netns])
            os.close(w.netns)
            w.netns = -1
        for fd in (w.req_w, w.stdin_w, w.out_r, w.err_r, w.status_r, w.pidfd):
            if fd >= 0:
                self.close_fd(fd)
        w.req_w = w.stdin_w = w.out_r = w.err_r = w.status_r = w.pidfd = -1
        self.free_uids.append(w.uid)
        self.live -= 1

    def close_fd(self, fd):
        if fd in self.fd_owner:
            self.sel.unregister(fd)
            del self.fd_owner[fd]
        os.close(fd)

    def on_channel(self):
        try:
            data = os.read(0, 1 << 20)
        except BlockingIOError:
            return
        if not data:
            raise SystemExit(0)
        self.inbuf += data
        while len(self.inbuf) >= 8:
            total, hlen = struct.unpack_from("<II", self.inbuf)
            if len(self.inbuf) < 4 + total:
                break
            body = bytes(self.inbuf[8:4 + total])
            del self.inbuf[:4 + total]
            header = json.loads(body[:hlen])
            if header.get("t") == "run":
                self.queue.append(Run(header, body[hlen:]))
        self.drain_queue()

    def drain_queue(self):
        waiting = []
        for run in self.queue:
            if not run.python and not self.native:
                self.send({"t": "result", "id": run.id, "error": "no native worker to run programs",
                           "damaged": True, "stdout_len": 0, "stderr_len": 0})
                continue
            ready = self.ready[self.kind_of(run)]
            if ready:
                self.start(ready.pop(0), run)
            else:
                waiting.append(run)
        self.queue = waiting
        self.top_up()

    def start(self, w, run):
        h = run.header
        w.run = run
        files_len = sum(f["len"] for f in h.get("files", []))
        req = {k: h[k] for k in ("mode", "argv", "code", "args", "filename", "env", "files",
                                 "limits", "collect", "cwd") if k in h}
        run.stdin = run.payload[files_len:]
        run.start = time.monotonic()
        run.deadline = run.start + h.get("limits", {}).get("wall_ms", 10000) / 1000.0
        run.open = {0, 1, "status", "exit"}
        for fd, what in ((w.out_r, 0), (w.err_r, 1), (w.status_r, "status")):
            os.set_blocking(fd, False)
            self.fd_owner[fd] = (w, what)
            self.sel.register(fd, selectors.EVENT_READ, "worker")
        if w.kind == "py":
            # Python workers read a marshal'd dict (worker_run), without the environment when
            # it is the zygote's own; native ones a frame (agent/call_worker.cc).
            env = req.pop("env", {})
            if env != self.env:
                req["env"] = env
            if "files" in req:
                req["data"] = run.payload[:files_len]
            blob = marshal.dumps(req)
            msg = struct.pack("<I", len(blob)) + blob
        else:
            msg = frame(req, run.payload[:files_len])
        try:
            write_all(w.req_w, msg)
        except OSError:
            pass  # W is gone; its end (and the error it left) comes from the zygote
        self.close_fd(w.req_w)
        w.req_w = -1
        if run.stdin:
            os.set_blocking(w.stdin_w, False)
            self.fd_owner[w.stdin_w] = (w, "stdin")
            self.sel.register(w.stdin_w, selectors.EVENT_WRITE, "worker")
        else:
            self.close_fd(w.stdin_w)
            w.stdin_w = -1

    def on_worker(self, fd):
        w, what = self.fd_owner[fd]
        run = w.run
        if what == "native-exit":
            self.close_fd(fd)
            w.pidfd = -1
            try:
                os.waitpid(w.pid, os.WNOHANG)
            except ChildProcessError:
                pass
            self.by_pid.pop(w.pid, None)
            w.exit = {"exit_code": -1, "signal": signal.SIGKILL}  # counts only without a report
            self.on_worker_end(w)
            return
        if what == "stdin":
            try:
                n = os.write(fd, run.stdin[:1 << 16])
                run.stdin = run.stdin[n:]
            except BlockingIOError:
                return
            except OSError:
                run.stdin = b""  # the program closed its stdin
            if not run.stdin:
                self.close_fd(fd)
                w.stdin_w = -1
            return
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not data:
            self.close_fd(fd)
            run.open.discard(what)
            if what == "status":
                w.status_r = -1
            elif what == 0:
                w.out_r = -1
            else:
                w.err_r = -1
            self.maybe_finish(w)
        elif what == "status":
            run.status += data
            if len(run.status) > self.cfg["artifact_limit"] + (1 << 20):
                self.kill(w, run, hard=True)
            elif len(run.status) >= 8 and len(run.status) >= 4 + struct.unpack_from("<I", run.status)[0]:
                # W's whole report is in: the result need not wait for the pipe's end, which
                # comes only when W's exit has torn down its copy of the interpreter (4-8 ms).
                self.close_fd(fd)
                w.status_r = -1
                run.open.discard("status")
                self.maybe_finish(w)
        else:
            cap = run.header.get("limits", {}).get("max_output", 1 << 20)
            room = cap - len(run.out[what])
            if len(data) > room:
                run.truncated[what] = True
                if run.header.get("limits", {}).get("kill_at_output_cap", True) and not run.output_limit:
                    run.output_limit = True
                    self.kill(w, run)
                data = data[:max(room, 0)]
            run.out[what] += data

    def kill(self, w, run, hard=False):
        """Python runs in W itself: end it. A spawned program is ended by W (SIGUSR1), which
        then reports its usage; W is killed outright if it has not done so within 0.5 s."""
        if w.pidfd < 0:
            return
        sig = signal.SIGKILL if (hard or run.python) else signal.SIGUSR1
        if run.killed_at is None or hard:
            run.killed_at = time.monotonic()
            try:
                signal.pidfd_send_signal(w.pidfd, sig)
            except OSError:
                pass

    def report(self, run):
        """W's own report (status pipe): (header, files) or (None, b"")."""
        st = bytes(run.status)
        if len(st) < 8:
            return None, b""
        total, hl = struct.unpack_from("<II", st)
        try:
            rep = json.loads(st[8:8 + hl])
        except ValueError:
            return None, b""
        return (rep if isinstance(rep, dict) else None), st[8 + hl:4 + total]

    def maybe_finish(self, w):
        """The result goes out once stdout, stderr and W's report are in, without waiting for
        W's namespaces to be torn down; W's uid is reused only after the zygote saw it end.
        Without a report (W was killed, or a Python program closed or spoiled it), the
        zygote's report of W's end is the result."""
        run = w.run
        if run is None or run.open - {"exit"}:
            return
        rep, files = self.report(run)
        ok_report = rep is not None and "exit_code" in rep
        if not ok_report and "exit" in run.open and not (rep and "error" in rep):
            return
        wall_ms = int((time.monotonic() - run.start) * 1000)
        res = {"t": "result", "id": run.id, "wall_ms": wall_ms, "timed_out": run.timed_out,
               "output_limit": run.output_limit, "stdout_truncated": run.truncated[0],
               "stderr_truncated": run.truncated[1]}
        if ok_report:
            for k in ("exit_code", "signal", "cpu_ms", "maxrss_kb", "files"):
                if k in rep:
                    res[k] = rep[k]
            if run.python:
                # A Python program runs in the process that reports it, so it can write a
                # report of its own first: its time and memory are never less than the kernel's.
                cpu_ms, hwm_kb = kernel_usage(w.pid)
                res["cpu_ms"] = max(_int(res.get("cpu_ms")), cpu_ms)
                res["maxrss_kb"] = max(_int(res.get("maxrss_kb")), hwm_kb)
        else:
            for k in ("exit_code", "signal", "cpu_ms", "maxrss_kb"):
                res[k] = (w.exit or {}).get(k, 0)
            files = b""
            if rep and "error" in rep:
                res["error"], res["damaged"] = rep["error"], True
            elif not run.python and not (run.timed_out or run.output_limit or run.killed_at):
                res["error"], res["damaged"] = "worker ended without a report", True
        res["stdout_len"], res["stderr_len"] = len(run.out[0]), len(run.out[1])
        w.run = None
        w.finished = True
        if "exit" not in run.open:
            self.discard(w)
        elif run.python and w.pidfd >= 0:
            # W was about to _exit after its report. A program that wrote a report of its own
            # and closed its streams must not outlive its result either: the call is over.
            try:
                signal.pidfd_send_signal(w.pidfd, signal.SIGKILL)
            except OSError:
                pass
        self.send(res, bytes(run.out[0]) + bytes(run.out[1]) + files)
        self.top_up()

    def check_deadlines(self):
        now = time.monotonic()
        nearest = None
        for w in list(self.by_pid.values()):
            run = w.run
            if run is None:
                continue
            if run.killed_at is None and now >= run.deadline:
                run.timed_out = True
                self.kill(w, run)
            elif run.killed_at is not None and now - run.killed_at >= 0.5:
                self.kill(w, run, hard=True)
            t = run.deadline if run.killed_at is None else run.killed_at + 0.5
            nearest = t if nearest is None else min(nearest, t)
        return None if nearest is None else max(0.0, nearest - now)

    def loop(self):
        self.top_up()
        self.send({"t": "ready", "pid": os.getpid(), "python": sys.version.split()[0],
                   "zygote": self.cfg["zygote"]["zygote"], "zygote_why": self.cfg["zygote"]["why"]})
        while True:
            timeout = self.check_deadlines()
            for key, _ in self.sel.select(timeout):
                if key.data == "channel":
                    self.on_channel()
                elif key.data == "zygote":
                    self.on_zygote()
                elif key.fd in self.fd_owner:
                    self.on_worker(key.fd)


def _int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def kernel_usage(pid):
    """A live worker's CPU time (its own and its waited-for children's, 10 ms ticks) and peak
    RSS, as the kernel counts them; zeros if it is gone (its end's report then has them)."""
    try:
        stat, status = read_proc(f"/proc/{pid}/stat"), read_proc(f"/proc/{pid}/status")
        f = stat.rsplit(b")", 1)[1].split()
        ticks = int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])  # utime stime cutime cstime
        at = status.find(b"VmHWM:")
        hwm = int(status[at + 6:].split()[0]) if at >= 0 else 0
    except (OSError, IndexError, ValueError):
        return 0, 0
    return ticks * 1000 // CLK_TCK, hwm


def high_fd(fd):
    """Moves a new fd above the numbers a spawned worker's stdio and pipes take (0-5)."""
    if fd >= 10:
        return fd
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return new


def root_flags():
    f = os.statvfs("/").f_flag
    out = 0
    for st, ms in ((1, MS_RDONLY), (2, MS_NOSUID), (4, MS_NODEV), (8, MS_NOEXEC),
                   (1024, MS_NOATIME), (2048, MS_NODIRATIME), (4096, MS_RELATIME)):
        if f & st:
            out |= ms
    return out


def copy_to_memfd(fd, n, name):
    """Streams n bytes of the channel into a memfd: the worker binary is megabytes,
    and reading it into a Python object would grow the heap every later fork copies."""
    mfd = high_fd(os.memfd_create(name, os.MFD_CLOEXEC))
    while n:
        chunk = os.read(fd, min(n, 1 << 16))
        if not chunk:
            raise EOFError("channel closed")
        write_all(mfd, chunk)
        n -= len(chunk)
    return mfd


def main():
    os.set_blocking(0, True)
    total, hlen = struct.unpack("<II", read_exact(0, 8))
    cfg = json.loads(read_exact(0, hlen))
    rest = total - 4 - hlen
    bpf_len = min(cfg.get("bpf_len", rest), rest)
    bpf = read_exact(0, bpf_len)

    with open("/proc/self/mountinfo") as f:
        shared = any(" shared:" in line for line in f)
    cfg.setdefault("max_workers", 4)
    cfg.setdefault("prefork", 2)
    cfg.setdefault("tmp_bytes", 256 << 20)
    cfg.setdefault("artifact_limit", 64 << 20)
    cfg.update(make_private=shared, has_shm=os.path.isdir("/dev/shm"), root_flags=root_flags())
    # The same set-up flags for the C zygote and native workers: 1 make / private, 2 /dev/shm.
    cfg["setup_flags"] = (1 if cfg["make_private"] else 0) | (2 if cfg["has_shm"] else 0)
    lib_len = min(cfg.get("lib_len", 0), rest - bpf_len)
    lib_fd = copy_to_memfd(0, lib_len, "warren-zygote") if lib_len else -1
    zsock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # The zygote is forked before the worker binary is read: every page it holds is a page
    # each of its clones maps at fork and unmaps at exit.
    pid = os.fork()
    if pid == 0:
        zsock.close()
        zygote_main(theirs, cfg, bpf, lib_fd)
        os._exit(0)
    theirs.close()
    if lib_fd >= 0:
        os.close(lib_fd)
    worker_len = min(cfg.get("worker_len", 0), rest - bpf_len - lib_len)
    worker_fd = copy_to_memfd(0, worker_len, "warren-call-worker") if worker_len else -1
    skip = rest - bpf_len - lib_len - worker_len
    while skip > 0:
        skip -= len(read_exact(0, min(skip, 1 << 16)))
    hello = zsock.recv(4096)  # which zygote runs: the C loop, or Python's if that failed to load
    if not hello:
        raise SystemExit("zygote ended")
    cfg["zygote"] = json.loads(hello)
    zsock.setblocking(False)
    Dispatcher(cfg, zsock, bpf, worker_fd).loop()


if __name__ == "__main__":
    main()
