"""Training numerics: gradient underflow census, loss scaling, master weights and the memory bill.

    from precisionlab.training import census, example_histogram, max_power_of_two_scale
    sample = example_histogram()                  # or load_gradients("grads.npy" | "hist.csv")
    census(sample, "fp16").subnormal              # fraction whose fp16 rounding is subnormal
    max_power_of_two_scale(sample.max_magnitude)  # 16: S = 2^16 keeps the max finite in fp16
    bill("mixed_precision", "adam").bytes_per_param   # 16.0, the same as fp32 training

numpy only; every rounding goes through precisionlab.round_to.
"""

from precisionlab.training.census import (
    CENSUS_FORMATS,
    CLASSES,
    CensusRow,
    GradientSample,
    census,
    classify,
    from_histogram,
    from_values,
    load_gradients,
    max_power_of_two_scale,
)
from precisionlab.training.example import example_histogram, lognormal_parameters
from precisionlab.training.memory import OPTIMIZERS, RECIPES, Bill, Recipe, all_bills, bill, optimizer_state_bytes
from precisionlab.training.scaler import DynamicLossScaler, has_overflow, scale_trace
from precisionlab.training.toy import (
    TRAPS,
    VARIANTS,
    Problem,
    RunLog,
    TrainConfig,
    TrainingStudy,
    Variant,
    make_problem,
    run_study,
    train,
)

__all__ = [
    "CENSUS_FORMATS",
    "CLASSES",
    "OPTIMIZERS",
    "RECIPES",
    "TRAPS",
    "VARIANTS",
    "Bill",
    "CensusRow",
    "DynamicLossScaler",
    "GradientSample",
    "Problem",
    "Recipe",
    "RunLog",
    "TrainConfig",
    "TrainingStudy",
    "Variant",
    "all_bills",
    "bill",
    "census",
    "classify",
    "example_histogram",
    "from_histogram",
    "from_values",
    "has_overflow",
    "load_gradients",
    "lognormal_parameters",
    "make_problem",
    "max_power_of_two_scale",
    "optimizer_state_bytes",
    "run_study",
    "scale_trace",
    "train",
]
