"""The charts (matplotlib): shared figure style, the report's plots, the roofline, telemetry and inference plots.
May import analysis/ and the rooms below it, and machine; never history/ or render/."""
