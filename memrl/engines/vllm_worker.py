"""vLLM worker extension: in-place weight reload, from a torch.save payload or a broadcast, inside each vLLM worker.

vLLM mixes this class into its worker class (`LLM(worker_extension_cls=...)`), so its methods run in the
worker process through `LLM.collective_rpc`. Method names carry a `memrl_` prefix because vLLM refuses an
extension whose attribute names clash with the worker's own (it already has `reload_weights`, `update_weights`).
"""

from __future__ import annotations

import io
from collections.abc import Iterable

import torch

from memrl.weight_sync import StagingReceiver, TensorMeta, broadcast_recv, init_group


class WeightSyncExtension:
    """Methods added to every vLLM worker; `self` is the worker (it has `model_runner`, `rank`, `model_config`)."""

    def memrl_load_weights(self, payload: bytes) -> None:
        """Reload the model in place from a `torch.save`d list of (HF parameter name, tensor) pairs."""
        self._memrl_reload(torch.load(io.BytesIO(payload), weights_only=True))

    def memrl_init_weight_sync(self, host: str, port: int, rank: int, world_size: int, backend: str) -> None:
        """Join the weight-sync group; the workers of one engine take ranks rank, rank + 1, ... in vLLM order."""
        self._memrl_group = init_group(host, port, rank + self.rank, world_size, backend)
        device = self.model_runner.device
        self._memrl_staging = StagingReceiver(self._memrl_group, device) if device.type == "cpu" else None

    def memrl_receive_weights(self, metas: list[TensorMeta], bucket_bytes: int) -> None:
        """Receive rank 0's broadcast onto the model's device and reload from it: on a CPU into buffers kept from
        sync to sync (`StagingReceiver`), on a GPU bucket by bucket into buffers of its caching allocator."""
        group = getattr(self, "_memrl_group", None)
        if group is None:
            raise RuntimeError("receive_weights called before init_weight_sync joined a weight-sync group")
        if self._memrl_staging is not None:
            self._memrl_reload(self._memrl_staging.receive(metas))
        else:
            self._memrl_reload(broadcast_recv(group, metas, bucket_bytes, device=self.model_runner.device))

    def memrl_reseed(self, seed: int) -> None:
        """Reset the sampling RNG: the CPU and GPU samplers draw engine-level noise from torch's default generators."""
        from vllm.utils.torch_utils import set_random_seed

        set_random_seed(seed)

    def _memrl_reload(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.model_runner.reload_weights(weights_iterator=named_tensors)
        if getattr(self.model_config.hf_config, "tie_word_embeddings", False):
            self._memrl_retie_embeddings()

    def _memrl_retie_embeddings(self) -> None:
        # The reload skips a tied lm_head (no weights of its own), so state derived from its weight at load time
        # (the CPU build packs lm_head for its GEMM) still holds the old embedding: redo that processing.
        model = self.model_runner.get_model()
        lm_head = getattr(model, "lm_head", None)
        embed = getattr(getattr(model, "model", None), "embed_tokens", None)
        if lm_head is None or embed is None:
            raise RuntimeError(
                f"cannot re-tie embeddings of {type(model).__name__}: "
                "expected model.lm_head and model.model.embed_tokens"
            )
        if lm_head.weight is not embed.weight:
            raise RuntimeError("lm_head no longer shares the input embedding after the reload; cannot re-tie in place")
        lm_head.quant_method.process_weights_after_loading(lm_head)
