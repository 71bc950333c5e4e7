"""The format advisor: a scenario (pretrain, serve, reduction, kv_cache, fp8_portability, custom) in, a
recommended format out, every column filled with numbers computed by the format engine and the capacity
model.

    from precisionlab.advise import SCENARIOS, advise
    advise("serve", inputs)                # an Advice: the format and every column, argued with numbers

Modules: advisor (the rules as data, and `advise`), scenario_facts (the numbers each scenario's
templates print), format_choice (the custom scenario's chooser: range and precision needs on a target).
"""

from precisionlab.advise.advisor import FIXED_SCENARIOS, RULES, SCENARIOS, Advice, Inputs, Rule, advise

__all__ = ["FIXED_SCENARIOS", "RULES", "SCENARIOS", "Advice", "Inputs", "Rule", "advise"]
