"""The step machines: ReAct, ReWOO, plan-execute-replan, Reflexion and Tree-of-Thoughts,
one file each, plus what they share: machine.py (what a machine yields and receives, and
the read-only view of its run), _critique.py (the reflection call), folding.py (ReAct's
compaction) and toolsearch.py (the K tools a task needs). They do no I/O and import no run
plumbing: loopwright.runtime drives them."""
