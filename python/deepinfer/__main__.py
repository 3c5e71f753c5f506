"""`python3 -m deepinfer serve [flags]`: the server of `deepinfer serve`, in this process.

Without --model it serves the embedded default model. The flags are those of `deepinfer serve
--help`, except that data-parallel ranks are started by the deepinfer binary only.
"""

import sys

from deepinfer import _core
from deepinfer.llm import DEFAULT_MODEL

_USAGE = """usage: python3 -m deepinfer serve [--model DIR] [--host 127.0.0.1] [--port 8000] [flags of `deepinfer serve --help`]
Runs deepinfer's OpenAI- and Anthropic-compatible HTTP server (the embedded default model without --model).
"""


def _has_flag(args, flag):
    return any(a == flag or a.startswith(flag + "=") for a in args)


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(_USAGE)
        return 0 if args else 2
    if args[0] != "serve":
        sys.stderr.write(f"deepinfer: unknown command '{args[0]}'\n{_USAGE}")
        return 2
    args = args[1:]
    if _has_flag(args, "--data-parallel-size") and not _has_flag(args, "--data-parallel-rank"):
        # The binary starts the other ranks by running itself again; a python3 process cannot.
        sys.stderr.write(
            "deepinfer serve: error: --data-parallel-size starts its ranks from the deepinfer binary; "
            "run build/bin/deepinfer serve, or start each rank with --data-parallel-rank\n"
        )
        return 2
    if not _has_flag(args, "--model"):
        args = ["--model", DEFAULT_MODEL] + args
    sys.stdout.flush()
    return _core.serve(args)


if __name__ == "__main__":
    sys.exit(main())
