"""Named health checks: each reads detector signals and decides incidents."""

from streamwatch.checks.base import Check
from streamwatch.checks.cap import CapCheck
from streamwatch.checks.components import ComponentsCheck, is_component
from streamwatch.checks.drift import DriftColumn, drop_copies, screen
from streamwatch.checks.entropy import EntropyCheck
from streamwatch.checks.hacking import HackingCheck
from streamwatch.checks.lag import LagCheck
from streamwatch.checks.length import LengthCheck, TruncationCheck
from streamwatch.checks.mismatch import MismatchCheck
from streamwatch.checks.remedies import REMEDIES
from streamwatch.checks.reward import RewardCheck
from streamwatch.checks.signal import NoSignalCheck
from streamwatch.checks.spike import SpikeCheck
from streamwatch.checks.stall import StallCheck
from streamwatch.checks.straggler import StragglerCheck

__all__ = [
    "REMEDIES",
    "CapCheck",
    "Check",
    "ComponentsCheck",
    "DriftColumn",
    "EntropyCheck",
    "HackingCheck",
    "LagCheck",
    "LengthCheck",
    "MismatchCheck",
    "NoSignalCheck",
    "RewardCheck",
    "SpikeCheck",
    "StallCheck",
    "StragglerCheck",
    "TruncationCheck",
    "drop_copies",
    "is_component",
    "screen",
]
