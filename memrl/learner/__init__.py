"""DeepSpeed learners: micro-batching, losses, advantages and the data-parallel learner group."""
