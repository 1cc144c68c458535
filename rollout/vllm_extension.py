"""Methods mixed into vLLM's worker (``worker_extension_cls``), reached through ``collective_rpc``.

Runs inside the vLLM worker process. CPU linears are pre-packed at start-up, so plain
``model.load_weights`` fails there; ``reload_weights`` runs the layer-wise reload that restores,
loads and re-packs them.

Tied embeddings need one more step. The checkpoint has no ``lm_head.weight`` when it is tied, so the
layer-wise reload finds nothing to load for the LM head and puts its *old* kernel tensors back (vLLM
0.32 logs "ParallelLMHead: Failed to load weights"): on CPU the head's pre-packed GEMM weights stay
those of the first checkpoint although its ``weight`` is the new embedding, so sampling silently uses
stale logits. ``_retie_lm_head`` points the head at the embedding and re-runs its post-load processing
(the CPU pre-pack; a no-op on GPU), so the sampler uses the new weights.
"""

from __future__ import annotations


class WeightLoaderExtension:
    def load_hf_weights_bytes(self, blob: bytes) -> int:
        """Load HF-format weights serialized with ``safetensors.torch.save``; returns the tensor count."""
        from safetensors.torch import load

        return self._reload(list(load(blob).items()))

    def load_hf_weights_file(self, path: str) -> int:
        """Load HF-format weights from a safetensors file on this host (memory-mapped: only the reload copies
        them); returns the tensor count."""
        from safetensors import safe_open

        with safe_open(path, framework="pt") as f:
            return self._reload([(name, f.get_tensor(name)) for name in f.keys()])

    def _reload(self, named: list) -> int:
        self.reload_weights(weights_iterator=named, is_checkpoint_format=True)
        self._retie_lm_head()
        return len(named)

    def _retie_lm_head(self) -> None:
        model = self.model_runner.model
        if not getattr(self.model_config.hf_config, "tie_word_embeddings", False):
            return
        lm_head = getattr(model, "lm_head", None)
        embed = getattr(getattr(model, "model", None), "embed_tokens", None)
        if lm_head is None or embed is None:
            return
        lm_head.weight = embed.weight
        lm_head.quant_method.process_weights_after_loading(lm_head)
