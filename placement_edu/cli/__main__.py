"""``python -m placement_edu.cli ...``: the same as the ``placement-edu`` command."""

from placement_edu.cli import main

raise SystemExit(main())
