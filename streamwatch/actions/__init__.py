"""Actions on incidents: stop a run that is wasting compute, once it is sure.

``[[actions]]`` rules in the config (:mod:`streamwatch.actions.config`) match incidents like
routes do; :class:`~streamwatch.actions.actor.Actor` follows the firing incidents and the
runs' steps, decides with :func:`~streamwatch.actions.decide.decide_action` (a pure function
that names its reason) and carries out what is decided (:mod:`streamwatch.actions.execute`),
each action once per incident, recorded in the action log (:mod:`streamwatch.actions.log`).

Importing the package loads nothing (the command line's flags live in
:mod:`streamwatch.actions.args`).
"""
