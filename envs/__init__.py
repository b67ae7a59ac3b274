"""Gymnasium text environments shipped with memrl, registered under the `memrl/` namespace."""

import gymnasium

gymnasium.register(id="memrl/Echo-v0", entry_point="envs.echo:EchoEnv")
gymnasium.register(id="memrl/ChunkStream-v0", entry_point="envs.chunk_stream:ChunkStreamEnv")
