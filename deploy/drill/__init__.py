"""`causeway drill`: a disaster-recovery drill on a topology `causeway up` started.

A workload at the primary (workload.py), the disaster or the planned stop (disaster.py), the
promotion, the workload moved to the DR site, then what the DR site holds checked record by record
(verify.py) into a report (report.py); run.py runs the steps in order. The command line is
deploy/cli/drill.py. bench/failover_rto.py measures an operator's failover with the same parts.
"""
