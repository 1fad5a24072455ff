"""`embinit run` supervises its driver: the sweep runs in a child process with a process group of its own.

Why: the local Ray that a driver starts (its GCS and raylet) shares the driver's process group. A
SIGTERM or SIGHUP to the command's group (`kill -- -PGID`, `timeout`, a shell whose terminal hung up)
used to reach them with the driver; they died at once, and Ray's core worker in the driver ended the
process within ~60 ms (exit 1, "The connection to the plasma store is failed"), often before the
driver's own handler (embinit.sweep.interrupt) or its watcher (embinit.sweep.abandon) had closed the
sweep's MLflow runs: in one run of four the runs stayed RUNNING and the exit code was 1, not 143.

So the command's process, the supervisor, starts the driver (the same command, told so by
embinit.sweep.guardian's variable) in a new process group, and passes SIGINT, SIGTERM and SIGHUP on to
the driver alone, which then stops its trials as Ctrl-C does while its Ray stays up to close them. A
terminal's Ctrl-Z stops the driver's group (the driver and its local Ray), then the supervisor; `fg`
continues both. The driver dies with the supervisor (SIGKILL, Linux's parent-death signal), so a
`kill -9` of the command still ends everything at once, as before. What no group can keep out, a signal
to every process of a job (Slurm, systemd) or the OOM killer, may still end the driver before it closes
its runs: the supervisor then closes them (embinit.sweep.guardian) and says so. Its exit code is the
driver's, or, when it closed the runs after a signal, 128 + the signal's number.
A signal ignored when the command starts stays ignored and is not passed on (SIGINT of `embinit run &` in
a script, SIGHUP under `nohup`), as a command started so expects.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from typing import Callable

from embinit.sweep import guardian, hangup
from embinit.sweep.interrupt import signal_name

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1


def wanted() -> bool:
    """Whether this `embinit run` should supervise its driver: on POSIX, in the main thread, when it is not
    itself a supervised driver."""
    return (os.name == "posix" and guardian.GUARDIAN_ENV not in os.environ
            and threading.current_thread() is threading.main_thread())


def _own_group_dying_with(parent: int) -> Callable[[], None]:
    """The driver's start (`preexec_fn`): a process group of its own, which on a terminal is a background
    one, so SIGTTOU is ignored (its output goes on under `stty tostop`; its stdin is /dev/null, it reads
    none); on Linux, SIGKILL when the supervisor dies (and at once if it is gone already)."""
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None) if sys.platform.startswith("linux") else None

    def start() -> None:
        os.setpgid(0, 0)
        signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:
                os._exit(1)
    return start


def _drain(fd: int) -> list[str]:
    """What the driver said over the pipe, without waiting for its end (a process it forked may hold it)."""
    os.set_blocking(fd, False)
    data = b""
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
    return data.decode(errors="replace").splitlines()


def supervise(argv: list[str], farewell: Callable[[str | None, int], None]) -> int:
    """Run `embinit ARGV` as the supervised driver and wait for it; returns the exit code. Should the
    driver end leaving a sweep's runs open, they are closed and `farewell(how, returncode)` says so
    (`how`: the first signal that came, "Ctrl-C", "SIGTERM" or "SIGHUP", else None)."""
    terminal = hangup.terminal_fds()
    received: list[int] = []
    pending: list[int] = []
    child: list[subprocess.Popen] = []

    def forward(sig, _frame):
        if sig == signal.SIGHUP:
            hangup.detach(terminal)   # the terminal is gone: nothing this process says may crash it
        received.append(sig)
        if child:
            _send(child[0], sig)
        else:
            pending.append(sig)

    def stop(_sig, _frame):   # Ctrl-Z: the driver's group stops, then this process; `fg` continues them
        if child:
            _send_group(child[0], signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)
        signal.signal(signal.SIGTSTP, stop)

    def cont(_sig, _frame):
        if child:
            _send_group(child[0], signal.SIGCONT)

    handlers = {sig: forward for sig in FORWARDED if signal.getsignal(sig) is not signal.SIG_IGN}
    handlers.update({signal.SIGTSTP: stop, signal.SIGCONT: cont})
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    read, write = os.pipe()
    try:
        try:
            env = {**os.environ, guardian.GUARDIAN_ENV: f"{write}:{os.getpid()}"}
            proc = subprocess.Popen([sys.executable, "-m", "embinit", *argv], pass_fds=(write,),
                                    stdin=subprocess.DEVNULL, env=env, preexec_fn=_own_group_dying_with(os.getpid()))
        finally:
            os.close(write)
        child.append(proc)
        for sig in pending:   # those that came while it started
            _send(proc, sig)
        code = proc.wait()
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)
    return _after(code, _drain(read), received, farewell)


def _after(code: int, said: list[str], received: list[int], farewell: Callable[[str | None, int], None]) -> int:
    """The exit code, once the driver ended with `code` after saying `said`. The sweeps it left open are
    closed first. A driver cut short (killed, or ended by Ray: exit 1) after a signal came did not say
    what happened, nor return the signal's exit code: this process does."""
    stops = [sig for sig in received if sig in FORWARDED]
    how = signal_name(stops[0]) if stops else None
    status = code if code >= 0 else 128 - code
    closed = 0
    sweeps = guardian.left_open(said)
    if sweeps:
        try:
            closed = guardian.close_left_open(sweeps, how, code)
        except Exception as e:   # the store fails too: a later `embinit run` of the spec closes them
            hangup.say(f"embinit: could not close the sweep's MLflow runs after its driver ended "
                       f"({guardian.how_ended(code)}): {type(e).__name__}: {e}")
    cut_short = code < 0 or code == 1
    if closed or (stops and cut_short):
        if not guardian.has_said_interrupted(said):   # a driver that said so quit (Ctrl-C twice) or was cut short after
            farewell(how, code)
        if stops:
            return 128 + stops[0]
    return status


def _send(proc: subprocess.Popen, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass


def _send_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
