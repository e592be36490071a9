"""Presentation: charts (``plots.py``) and the widgets the notebooks use (``widgets.py``).
Reads the core's derivations; the core never imports it. Tables and JSON live beside the
derivations in ``report.py``; the runtime's widget is ``runtime_explorer.py``."""
