"""Gymnasium text environments shipped with memrl, registered under the `memrl/` namespace."""

import gymnasium

gymnasium.register(id="memrl/Echo-v0", entry_point="envs.echo:EchoEnv")
