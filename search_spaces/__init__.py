"""Search spaces as data: ``<variant>.yaml`` per variant (tunables, constraints, per-arch sections; or
``same_as: <variant>``, that variant's space whole, for a kernel with the same config keys).

A package only so that the YAML files ship in the wheel; ``harness/static/space.py`` reads them.
"""

from pathlib import Path

SPACES_DIR = Path(__file__).resolve().parent
