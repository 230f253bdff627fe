"""The solvers every action shares (KAI's ``actions/common``): placing a GangGroup whole
(``gangs``, built of ``members``, ``subgroups`` and ``tiers``), placing a running gang's new
members (``running``), and choosing victims (``victims``). They work on a session and a
Statement and decide nothing about the queue: which GangGroup comes next, and what its
outcome means, is the action's. They never import an action.
"""
