import sys

try:
    from .commands import main
except KeyboardInterrupt:  # Ctrl-C while the command was still loading
    sys.exit(130)

raise SystemExit(main())
