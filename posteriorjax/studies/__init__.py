"""Studies built on the core: the bimodal calibration problem (`bimodal`), the observation
geometry (`geometry`, with the learned `estimators`), observation-pattern transfer (`transfer`),
the MIRA paper's synthetic experiments (`mira_paper`) and the task demo (`demo`)."""
