"""What the model is sent: the prompt templates (templates.py: PromptSet, the defaults,
filling them), the worked examples built from the tools' and the registry's examples
(examples.py), and the whole-run example nearest a task (nearest_run.py, ReAct's)."""
