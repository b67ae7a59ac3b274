"""Models memrl builds itself (the embedded tiny Qwen2)."""
