"""Rollout with vLLM on GPU: sleep mode gives the KV cache and weights back between
generations, and the actor's weights are loaded in place before each generation.

vLLM is an optional extra (`pip install rldbg[vllm]`) and is imported only here. The engine
runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so weight loading reaches the model
directly; it needs a checkpoint directory (config + tokenizer) to start from, which the
hybrid worker writes once at init.
"""
from __future__ import annotations

import os
from typing import Iterable

import torch

from reference_trainer.engines.base import RolloutEngine, SamplingConfig


def _import_vllm():
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        raise RuntimeError(
            "rollout.engine=vllm needs vLLM and a CUDA GPU: pip install 'rldbg[vllm]' "
            "(or use rollout.engine=hf)"
        ) from e
    if not torch.cuda.is_available():
        raise RuntimeError("rollout.engine=vllm needs a CUDA GPU; on CPU use rollout.engine=hf")
    return vllm


class VLLMEngine(RolloutEngine):
    def __init__(self, model_dir: str, pad_token_id: int, eos_token_id: int, dtype: str = "bfloat16",
                 gpu_memory_utilization: float = 0.3, seed: int = 0):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        vllm = _import_vllm()
        self._vllm = vllm
        self.pad_id, self.eos_id = pad_token_id, eos_token_id
        self.llm = vllm.LLM(
            model=model_dir, tokenizer=model_dir, dtype=dtype, seed=seed,
            gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=True,
            enforce_eager=True, skip_tokenizer_init=True,
        )
        self._asleep = False

    def generate(self, input_ids, attention_mask, sampling: SamplingConfig):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=ids[mask.bool()].tolist())
                   for ids, mask in zip(input_ids.cpu(), attention_mask.cpu())]
        params = SamplingParams(n=1, temperature=sampling.temperature, top_p=sampling.top_p,
                                max_tokens=sampling.max_new_tokens, stop_token_ids=[self.eos_id],
                                detokenize=False)
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        responses = torch.full((len(outs), sampling.max_new_tokens), self.pad_id, dtype=torch.long)
        for i, out in enumerate(outs):
            ids = list(out.outputs[0].token_ids)[: sampling.max_new_tokens]
            responses[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        return responses.to(input_ids.device)

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        weights = list(named_tensors)

        def _load(worker, weights=weights):
            worker.model_runner.model.load_weights(weights=weights)

        self.llm.collective_rpc(_load)
        self.llm.reset_prefix_cache()

    def sleep(self, level: int) -> None:
        if not self._asleep:
            self.llm.sleep(level=level)
            self._asleep = True

    def wake_up(self, tags=("weights", "kv_cache")) -> None:
        if self._asleep:
            self.llm.wake_up(tags=list(tags))
            if "kv_cache" in tags:
                self._asleep = False

    def release_kv_cache(self) -> None:
        # vLLM's KV cache is a preallocated pool: it is given back by sleep(), not per request.
        self.llm.reset_prefix_cache()

    def memory_ledger(self, only=None) -> dict[str, int]:
        free, total = torch.cuda.mem_get_info()
        return {"rollout_device_used": total - free}
