"""Thin, typed detectors. Each keeps river's contract: ``update(x)``, a read-only signal,
public hyper-parameters under the constructor's names, picklable state.

Non-finite input is ignored by every detector here (a single NaN disables river's detectors
for good); the Monitor reports non-finite values as their own incident.
"""

from streamwatch.detectors.ewma import Ewma
from streamwatch.detectors.persistence import Persistence
from streamwatch.detectors.trend import TrendBreak, trend_break
from streamwatch.detectors.window import Recent, Window

__all__ = ["Ewma", "Persistence", "Recent", "TrendBreak", "Window", "trend_break"]
