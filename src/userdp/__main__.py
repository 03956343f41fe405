"""``python -m userdp``: the ``userdp`` command line."""

import sys

try:  # Ctrl-C while the command line loads: one line and exit 130, like console_main
    from userdp.cli import console_main
except KeyboardInterrupt:
    print("userdp: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

if __name__ == "__main__":
    console_main()
