"""The vLLM rollout engine: generate, load weights, sleep and wake on a real GPU. Skipped
where CUDA or vLLM is absent (CI here has neither); run on a GPU machine with
`pip install -e .[vllm,test] && pytest -m gpu`."""
from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm (pip install rldbg[vllm])"),
]


def test_vllm_generate_sync_sleep_wake(tmp_path):
    from reference_trainer.engines.base import SamplingConfig
    from reference_trainer.engines.vllm import VLLMEngine
    from reference_trainer.tasks import build_causal_lm, build_tokenizer

    tok = build_tokenizer()
    model = build_causal_lm("llama-tiny", len(tok), seed=0, dtype=torch.bfloat16)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    engine = VLLMEngine(str(tmp_path), tok.pad_token_id, tok.eos_token_id, gpu_memory_utilization=0.2)
    enc = tok(["1 2 3 =", "4 5 6 ="], padding=True, return_tensors="pt")
    out = engine.generate(enc["input_ids"].cuda(), enc["attention_mask"].cuda(), SamplingConfig(4))
    assert out.shape == (2, 4)

    free_awake, _ = torch.cuda.mem_get_info()
    engine.sleep(level=1)
    free_asleep, _ = torch.cuda.mem_get_info()
    assert free_asleep > free_awake, "sleep should give device memory back"
    engine.wake_up(tags=("weights",))
    engine.load_weights((n, p.detach().cuda()) for n, p in model.named_parameters())
    engine.wake_up(tags=("kv_cache",))
    out = engine.generate(enc["input_ids"].cuda(), enc["attention_mask"].cuda(), SamplingConfig(4))
    assert out.shape == (2, 4)


def test_hybrid_worker_with_vllm_on_gpu(ray_cluster, tmp_path):
    import ray

    if ray.cluster_resources().get("GPU", 0) < 1:
        pytest.skip("the test cluster has no GPU")
    from reference_trainer.config import load_config
    from reference_trainer.trainer import fit

    cfg = load_config("demo", overrides=["rollout.engine=vllm", "resources.n_ranks=1", "trainer.total_steps=2",
                                         "model.dtype=bfloat16", "sft.steps=0", f"trainer.run_dir={tmp_path}",
                                         "trace.enabled=false", "trainer.progress=false"])
    history = fit(cfg)
    assert len(history) == 2
