-- The claim that holds a step attempt in progress: the delivery of a step message whose
-- execution claimed it (`<queue>:<msg id>:<read count>`), also for a step claimed at once
-- after the one the message names, or a local hand-over's mark (`<process id>#<n>`). A
-- redelivered message finds by it the step its dead worker held; a claim whose reply was lost
-- finds by it that the step is its own.
ALTER TABLE {{schema}}.workflow_steps ADD COLUMN claimed_by text;
