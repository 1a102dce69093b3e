"""``mariana._versions``: packages' versions for job.json without importing them."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import pytest

from mariana._versions import installed_version

pytestmark = pytest.mark.timeout(60)


def test_the_versions_are_the_installed_ones_imported_or_not():
    for module, dist in (("zmq", "pyzmq"), ("fsspec", "fsspec"), ("numpy", "numpy"), ("msgpack", "msgpack")):
        assert installed_version(module, dist) == version(dist), dist
    code = ("import sys; from mariana._versions import installed_version; "
            "print(installed_version('zmq', 'pyzmq'), installed_version('fsspec', 'fsspec'), "
            "'zmq' in sys.modules, 'fsspec' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == [version("pyzmq"), version("fsspec"), "False", "False"]
    with pytest.raises(PackageNotFoundError):
        installed_version("no_such_module_here", "no-such-dist-here")
