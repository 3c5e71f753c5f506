"""`python3 -m deepinfer serve [flags]`: the server of `deepinfer serve`, in this process.

Without --model it serves the embedded default model. The flags are those of `deepinfer serve
--help`. With --data-parallel-size N (and no --data-parallel-rank) this process is the machine's
first rank and starts the others as `python3 -m deepinfer serve ... --data-parallel-rank R`, as
the deepinfer binary does with itself.
"""

import ctypes
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from deepinfer import _core
from deepinfer.llm import DEFAULT_MODEL

_USAGE = """usage: python3 -m deepinfer serve [--model DIR] [--host 127.0.0.1] [--port 8000] [flags of `deepinfer serve --help`]
Runs deepinfer's OpenAI- and Anthropic-compatible HTTP server (the embedded default model without --model).
"""

_PR_SET_PDEATHSIG = 1


def _has_flag(args, flag):
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _flag_value(args, flag):
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1 :]
    return None


def _int_flag(args, flag, default):
    value = _flag_value(args, flag)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{flag} must be an integer, got '{value}'") from None


def _end_with_parent():
    # A started rank ends with the process that started it, as the binary's ranks do.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class _LocalRanks:
    """This machine's other ranks, started as copies of this command."""

    def __init__(self, args):
        size = _int_flag(args, "--data-parallel-size", 1)
        local = _int_flag(args, "--data-parallel-size-local", size)
        self.first_rank = _int_flag(args, "--data-parallel-start-rank", 0)
        self.address = _flag_value(args, "--data-parallel-address")
        self.made_address = None
        self.children = []
        if size < 2 or local < 1 or self.first_rank < 0 or self.first_rank + local > size:
            self.first_rank = None  # one rank, or flags the server reports as errors
            return
        if self.address is None:
            self.address = self.made_address = tempfile.mkdtemp(prefix="deepinfer-dp-")
        for rank in range(self.first_rank + 1, self.first_rank + local):
            self.children.append(
                subprocess.Popen(
                    [sys.executable, "-m", "deepinfer", "serve", *self.rank_args(args, rank)],
                    stdout=subprocess.DEVNULL,
                    preexec_fn=_end_with_parent,
                )
            )

    def rank_args(self, args, rank):
        own = list(args)
        if self.made_address is not None:
            own += ["--data-parallel-address", self.address]
        return own + ["--data-parallel-rank", str(rank)]

    def own_args(self, args):
        return args if self.first_rank is None else self.rank_args(args, self.first_rank)

    def stop(self, grace_s):
        # After a failure a started rank may be the cause: it gets a moment to print its own error.
        deadline = time.monotonic() + grace_s
        for child in self.children:
            try:
                child.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.send_signal(signal.SIGTERM)
        for child in self.children:
            child.wait()
        if self.made_address is not None:
            shutil.rmtree(self.made_address, ignore_errors=True)


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(_USAGE)
        return 0 if args else 2
    if args[0] != "serve":
        sys.stderr.write(f"deepinfer: unknown command '{args[0]}'\n{_USAGE}")
        return 2
    args = args[1:]
    if not _has_flag(args, "--model"):
        args = ["--model", DEFAULT_MODEL] + args
    ranks = None
    if not _has_flag(args, "--data-parallel-rank"):
        try:
            ranks = _LocalRanks(args)
        except ValueError as error:
            sys.stderr.write(f"deepinfer serve: error: {error}\n")
            return 2
        args = ranks.own_args(args)
    sys.stdout.flush()
    exit_code = 1
    try:
        exit_code = _core.serve(args)
    finally:
        if ranks is not None:
            ranks.stop(0.0 if exit_code == 0 else 2.0)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
