import pytest

from p2pfl.robotics.env import mujoco_available

_REASON = mujoco_available()
needs_mujoco = pytest.mark.skipif(_REASON is not None, reason=f"MuJoCo cannot render offscreen here: {_REASON}")
