"""Gymnasium text environments shipped with memrl, registered under the `memrl/` namespace."""

import gymnasium

gymnasium.register(id="memrl/Echo-v0", entry_point="memrl_envs.echo:EchoEnv")
gymnasium.register(id="memrl/ChunkStream-v0", entry_point="memrl_envs.chunk_stream:ChunkStreamEnv")
gymnasium.register(id="memrl/Search-v0", entry_point="memrl_envs.search:SearchEnv")
gymnasium.register(id="memrl/MemoryStore-v0", entry_point="memrl_envs.memory_env:MemoryStoreEnv")
gymnasium.register(id="memrl/WebShop-v0", entry_point="memrl_envs.webshop:WebShopEnv")
gymnasium.register(id="memrl/Copy-v0", entry_point="memrl_envs.copying:CopyEnv")

