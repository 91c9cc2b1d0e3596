"""Every text a model sees and how its answer is read: the policy, judge and verifier prompts with their versions (hashed into the fingerprint), and a reasoning model's thinking markers."""
