"""The fault seam lives in ``runstore._sql._faults`` (shared by both backends);
its names stay importable from here and from ``runstore.sqlite``."""

from .._sql._faults import ArmedFault as ArmedFault
from .._sql._faults import Fault as Fault
from .._sql._faults import FaultPlan as FaultPlan
from .._sql._faults import FaultPoint as FaultPoint
from .._sql._faults import FaultyConsensus as FaultyConsensus
from .._sql._faults import InjectedFault as InjectedFault
from .._sql._faults import RetryPolicy as RetryPolicy
