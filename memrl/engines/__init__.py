"""Inference engines behind one interface (memrl.engines.base): vLLM (vllm_engine) and a torch reference (torch_engine)."""
