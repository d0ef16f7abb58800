"""Search spaces as data: ``<variant>.yaml`` per variant (tunables, constraints, per-arch sections).

A package only so that the YAML files ship in the wheel; ``harness/static/space.py`` reads them.
"""

from pathlib import Path

SPACES_DIR = Path(__file__).resolve().parent
