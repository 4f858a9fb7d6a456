import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
# The suite tests the installed rigmon (tests/run installs the wheel), never the checkout's
# rigmon/ directory: the checkout leaves sys.path, here and in every python a test starts.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
os.environ["PYTHONSAFEPATH"] = "1"


def pytest_configure(config):
    import rigmon

    if Path(rigmon.__file__).resolve().is_relative_to(ROOT / "rigmon"):
        raise pytest.UsageError(f"rigmon is imported from the checkout ({rigmon.__file__}), not from an "
                                "installed wheel: run the tests with tests/run")
