"""The simulated world: arithmetic problems whose every step's truth is known, the policy and judge that write and read them, the domain worlds, and the refusal of text they cannot solve.

Test and benchmark instruments with known ground truth. The real pipeline reaches them only through the
registries that dispatch on a config's kind (the engine builder, the builtin problem source) and through the label-quality reports that compare rows with the simulated truth; the layer
test (tests/test_layers.py, SIMULATED_ENTRIES) names each of those doors. Their settings are a config
section of their own (prm_synth/config/simulated.py), which the config's engine unions name.
"""
