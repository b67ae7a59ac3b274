"""Gymnasium text environments shipped with memrl, registered under the `memrl/` namespace."""

import gymnasium

gymnasium.register(id="memrl/Echo-v0", entry_point="envs.echo:EchoEnv")
gymnasium.register(id="memrl/ChunkStream-v0", entry_point="envs.chunk_stream:ChunkStreamEnv")
gymnasium.register(id="memrl/Search-v0", entry_point="envs.search:SearchEnv")
gymnasium.register(id="memrl/MemoryStore-v0", entry_point="envs.memory_env:MemoryStoreEnv")
gymnasium.register(id="memrl/WebShop-v0", entry_point="envs.webshop:WebShopEnv")
gymnasium.register(id="memrl/Copy-v0", entry_point="envs.copying:CopyEnv")

