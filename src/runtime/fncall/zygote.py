# warren fncall runner: the zygote and the Python workers it clones. Runs inside a runner
# sandbox (a container sandbox made for fncall), started by the runner's dispatcher
# (`warren-agent --call-dispatcher`, src/agent/call_dispatcher.cc), which holds the node's
# channel and every call's data. Standard library only: the runner image brings python3.
#
# Processes (see docs/design.md, "fncall"):
#   dispatcher  C++, in the agent's binary: queues calls, hands each to a worker made ahead of
#               time (`prefork`), collects its output and report, enforces its wall limit.
#   zygote      this python3, started fresh by the dispatcher before any call exists, and never
#               sent any call's data: it only clones workers, so no call can find an earlier
#               call in memory. Its loop and W's set-up run in C (zygote_lib.c,
#               warren-zygote.so from the node): zygote_main calls into it and it returns only
#               in each new W. The Python loop below (zygote_main's and worker_main's) runs
#               where that library cannot load.
#   W (worker)  for Python code: cloned by the zygote into fresh mount, pid, ipc and uts
#               namespaces and a net namespace that is new or left as new by an earlier call
#               (zygote_lib.c; the Python loop always makes a new one), pid 1 there: mounts a
#               new /proc, a fresh tmpfs on /tmp (the call's directory) and /dev/shm, makes /
#               read-only, brings lo up; then drops to the call's own uid (no capabilities),
#               no_new_privs, Landlock (writes only in its tmpfs), seccomp (the node's call
#               filter, stacked on the runner's), and waits for its request; the code runs in W
#               itself, from the warm interpreter (one fork per call: on this kind of host every
#               page a forked Python touches is a costly fault). W's end ends every process of
#               the call and its namespaces.
#   native      for programs that are exec'd (C, C++, shell): pid 1 of the same namespaces,
#               cloned by the dispatcher's native forker (src/agent/native_forker.h) and
#               applying the same recipe (isolation/call_setup.c); it runs the program as pid 2
#               and reports its status, usage and the files asked for (agent/call_worker.cc). The forker
#               keeps their net and IPC namespaces itself (agent/call_ns_pool.h).
#
# Zygote messages (one JSON datagram each on the SOCK_SEQPACKET socket, fds as SCM_RIGHTS):
# {"uid": N} + a worker's five pipe ends -> {"pid": P} + its pidfd, or {"error": ...}; each
# child's end -> {"exited": P, "exit_code", "signal", "cpu_ms", "maxrss_kb"}. W's report
# (fd 4) is a frame: u32 LE length of the rest, u32 LE header length, JSON header, payload.
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
    # As isolation/call_limits.c: never above the worker's own hard limit; one that cannot be
    # set raises, and the call is refused.
    def cap(kind, value, hard_value=None):
        soft, hard = int(value), int(value if hard_value is None else hard_value)
        cur_hard = resource.getrlimit(kind)[1]
        if cur_hard != resource.RLIM_INFINITY:
            hard = min(hard, cur_hard)
            soft = min(soft, hard)
        resource.setrlimit(kind, (soft, hard))

    if lim.get("cpu_s"):
        s = int(lim["cpu_s"])
        cap(resource.RLIMIT_CPU, s, s + 1)  # SIGXCPU, then SIGKILL a second later
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


# zygote_lib.c's warren_worker_end where the library loaded: a call's end without the pages
# that os.kill, os.waitpid's exception, getrusage's results and the report's bytes would write.
_end_in_c = None


def run_python(main, code, args, filename):
    sys.argv = [filename] + list(args)
    sys.path[0:0] = [filename.rpartition("/")[0] or "/"]  # os.path.dirname, without its pages
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
    if _end_in_c is not None:
        _end_in_c(status)  # the steps below, in zygote_lib.c; never returns
    # The call is over: what the program started goes too (as our exit, pid 1's, would end it),
    # and is waited for, so that the usage counts every process of the call (a child that did
    # the work and was never waited for would otherwise pass under the limits), and none still
    # holding stdout keeps the result waiting.
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass  # none
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
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
        # The dispatcher ends us once it has our report and has read our usage from /proc
        # (a program could have written a report of its own): we must still be there, not
        # halfway through an exit that has already let go of our memory's figures.
        time.sleep(5)
    except OSError:
        pass
    os._exit(status)


def lo_up():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s, 0x8913, ifr)[:18])[1]
        fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", flags | 1))
    finally:
        s.close()


def worker_setup(req, cfg):
    """As root of the runner: the call's own mounts, hostname and loopback. The steps of
    isolation/call_setup.c (warren_call_setup), for where warren-zygote.so cannot load, with its
    constants (the masked /proc paths, the tmpfs inode limit) from the dispatcher's cfg."""
    uid = req["uid"]
    if cfg["make_private"]:
        mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for path in cfg["proc_masks"]:
        try:
            mount("/dev/null", path, None, MS_BIND)
        except OSError as e:
            if e.errno != errno.ENOENT or os.path.exists(path):  # absent: nothing to hide
                raise
    tmp_opts = f"size={cfg['tmp_bytes']},nr_inodes={cfg['tmp_inodes']},mode=0700,uid={uid},gid={uid}"
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


REQUEST_HEAD = struct.Struct("<4I6Q")  # runtime/fncall/zygote_request.h: wz_request_head
REQUEST_FILE = struct.Struct("<IIQ")  # wz_request_file


def apply_request_head():
    """W, set up: waits for its request and applies its first part (the files, the cwd, the
    limits), as zygote_lib.c does before any Python runs where the library loads; returns the
    length of the marshal'd rest (runtime/fncall/zygote_request.h)."""
    try:
        size = int.from_bytes(read_exact(3, 4), "little")
    except EOFError:
        os._exit(0)  # the runner is going away
    head = read_exact(3, size)
    version, nfiles, cwd_len, _, cpu_s, as_bytes, stack, fsize, nproc, nofile = \
        REQUEST_HEAD.unpack_from(head)
    if version != 1:
        raise ValueError(f"request version {version}")
    pos = REQUEST_HEAD.size
    cwd = os.fsdecode(head[pos:pos + cwd_len])
    pos += cwd_len
    files = []
    for _ in range(nfiles):
        name_len, mode, length = REQUEST_FILE.unpack_from(head, pos)
        pos += REQUEST_FILE.size
        name = os.fsdecode(head[pos:pos + name_len])
        pos += name_len
        if not name or "/" in name:
            raise ValueError(f"file name {name!r}")
        files.append((name, mode, length))
    for name, mode, length in files:
        fd = os.open("/tmp/" + name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        write_all(fd, read_exact(3, length))
        os.close(fd)
    if cwd:
        try:
            os.chdir(cwd)
        except OSError as e:
            os.write(2, f"warren: chdir {cwd}: {e.strerror}\n".encode())
            write_all(4, frame({"exit_code": 126, "signal": 0, "cpu_ms": 0, "maxrss_kb": 0}))
            os._exit(126)
    dict_len = int.from_bytes(read_exact(3, 4), "little")
    set_limits({"cpu_s": cpu_s, "as_bytes": as_bytes, "stack_bytes": stack, "fsize_bytes": fsize,
                "nproc": nproc, "nofile": nofile,
                # what reading the rest maps, as zygote_lib.c counts it
                "as_base": vm_size() + 2 * dict_len + (1 << 20)})
    return dict_len


def worker_run(main, dict_len=None):
    """W, set up (cwd /tmp): waits for its request and runs its Python code itself. The files,
    cwd and limits of the request are applied (by zygote_lib.c, or here if `dict_len` is None),
    the rest is a marshal'd dict from the dispatcher (call_dispatcher.cc, Start): cheaper to
    read than JSON."""
    if dict_len is None:
        dict_len = apply_request_head()
    req = marshal.loads(read_exact(3, dict_len))
    os.close(3)
    worker_call(main, req)


def worker_call(main, req):
    """W: runs its request's dict {mode, code, args, filename[, env]}; never returns."""
    if "env" in req:  # absent: the call's environment is the one the zygote has
        os.environ.clear()
        os.environ.update(req["env"])
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    if req.get("mode") == "python":
        gc.enable()
        run_python(main, req["code"], req.get("args", []), "/tmp/" + req.get("filename", "main.py"))
    # Programs that are exec'd run in native workers (agent/call_worker.h), not here.
    write_all(4, frame({"error": "worker setup: a Python worker got a program to exec"}))
    os._exit(1)


# ---------------------------------------------------------------------------------------------
# The zygote: clones workers on request and reports their end; holds nothing of any call.

def zygote_main(sock, cfg, bpf, lib_fd, probe=b""):
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)  # the channel stays with the dispatcher alone
    os.dup2(null, 1)
    os.close(null)
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, None, 0, 0)
    # Should the runner run out of memory, a call goes first, never the dispatcher (all share the
    # runner's cgroup): every worker inherits this.
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")
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
            global _end_in_c
            _end_in_c = lib.warren_worker_end
            _end_in_c.restype = None
            _end_in_c.argtypes = [ctypes.c_int]
            serve.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_ulonglong,
                              ctypes.c_uint, ctypes.c_ulong, ctypes.py_object, ctypes.c_char_p,
                              ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint]
            why = ""
        except (OSError, AttributeError) as e:
            why = f"warren-zygote.so: {e}"
        os.close(lib_fd)
    else:
        why = "no warren-zygote.so"
    hello = json.dumps({"zygote": "native" if serve else "python", "why": why,
                        "python": sys.version.split()[0]})
    if not serve:  # (the C loop adds what it pins, below)
        sock.send((hello[:-1] + ', "copied_at_clone": 0, '
                   '"copy_at_clone_why": "the zygote runs in Python"}').encode())
    if serve:
        # The loop runs in C and never comes back here in the zygote; it returns only in a
        # new worker, set up as worker_main would (see zygote_lib.c).
        # In each new worker the C code reads the request's dict and calls `entry` with it
        # (zygote_lib.c, run_python_entry); it returns here only where it finds no C API.
        entry = lambda req: worker_call(main, req)  # noqa: E731
        # It says we are ready itself (`hello`, with what it learned from the sample call
        # `probe`, run before any call is here: see zygote_lib.c, learn_hot_pages).
        rest = serve(sock.fileno(), bpf, len(bpf), cfg["tmp_bytes"], cfg["setup_flags"],
                     cfg["root_flags"], entry, hello[:-1].encode(), probe, len(probe),
                     cfg.get("probe_uid", 0))
        sock.detach()  # closed by the set-up: never close whatever takes its number later
        worker_run(main, rest)
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


def copy_to_memfd(data, name):
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    write_all(fd, data)
    return fd


def main():
    """The dispatcher (warren-agent --call-dispatcher) started us: zygote.py came on stdin, our
    configuration follows it (a frame: the calls' seccomp filter and warren-zygote.so as its
    payload), and fd 3 is our end of its socket. It started us with LD_BIND_NOW, so that every
    library's symbols were bound here once, not by each worker on its first call of each
    (a lookup, and a copy of the page it writes): it is no call's, and goes from the environment
    every worker starts with."""
    os.environ.pop("LD_BIND_NOW", None)
    os.set_blocking(0, True)
    cfg, rest = read_frame(0)
    bpf_len = min(cfg.get("bpf_len", 0), len(rest))
    bpf = rest[:bpf_len]
    lib = rest[bpf_len:bpf_len + cfg.get("lib_len", 0)]
    probe = rest[bpf_len + len(lib):bpf_len + len(lib) + cfg.get("probe_len", 0)]
    lib_fd = copy_to_memfd(lib, "warren-zygote") if lib else -1
    del rest, lib
    flags = cfg["setup_flags"]  # 1: make / private first (it is shared), 2: the image has /dev/shm
    cfg.update(make_private=bool(flags & 1), has_shm=bool(flags & 2))
    zygote_main(socket.socket(fileno=3), cfg, bpf, lib_fd, probe)


if __name__ == "__main__":
    main()
