"""Gymnasium text environments shipped with memrl, registered under the `memrl/` namespace."""

import gymnasium

gymnasium.register(id="memrl/Echo-v0", entry_point="envs.echo:EchoEnv")
gymnasium.register(id="memrl/ChunkStream-v0", entry_point="envs.chunk_stream:ChunkStreamEnv")
gymnasium.register(id="memrl/Search-v0", entry_point="envs.search:SearchEnv")
gymnasium.register(id="memrl/MemoryStore-v0", entry_point="envs.memory_env:MemoryStoreEnv")
gymnasium.register(id="memrl/WebShop-v0", entry_point="envs.webshop:WebShopEnv")
gymnasium.register(id="memrl/Copy-v0", entry_point="envs.copying:CopyEnv")


def tokenizer_corpus(num_tasks: int = 2000, seed: int = 0):
    """Representative text of every shipped env, for training a tokenizer that fits them (names, tags, answers)."""
    from envs import multihop, niah

    yield from multihop.corpus(num_tasks, seed)
    yield from niah.corpus(max(1, num_tasks // 10), seed)
