"""memrl's sample gymnasium text envs (the folder envs/, installed as memrl_envs): a package built on memrl's core
as a user's own would be. Importing it registers the `memrl/` ids; memrl imports it in each process that makes envs
through the `memrl.plugins` entry point it declares (memrl.plugins), never by name."""

import gymnasium

gymnasium.register(id="memrl/Echo-v0", entry_point="memrl_envs.echo:EchoEnv")
gymnasium.register(id="memrl/ChunkStream-v0", entry_point="memrl_envs.chunk_stream:ChunkStreamEnv")
gymnasium.register(id="memrl/Search-v0", entry_point="memrl_envs.search:SearchEnv")
gymnasium.register(id="memrl/MemoryStore-v0", entry_point="memrl_envs.memory_env:MemoryStoreEnv")
gymnasium.register(id="memrl/MemoryBank-v0", entry_point="memrl_envs.memory_bank:MemoryBankEnv")
gymnasium.register(id="memrl/WebShop-v0", entry_point="memrl_envs.webshop:WebShopEnv")
gymnasium.register(id="memrl/Copy-v0", entry_point="memrl_envs.copying:CopyEnv")
