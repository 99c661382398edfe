-- Argo CD health of a Kubeflow Trainer TrainJob (trainer.kubeflow.org/v1alpha1), installed as
-- argocd-cm `resource.customizations.health.trainer.kubeflow.org_TrainJob`.
-- The controller's conditions: Failed and Complete are terminal; Suspended is set while the job
-- waits (Kueue admits queued jobs by resuming them). Argo CD runs this in gopher-lua (Lua 5.1)
-- with only the base and table libraries: no string or math functions here.
local function text(c, fallback)
  if c.message ~= nil and c.message ~= "" then return c.message end
  if c.reason ~= nil and c.reason ~= "" then return c.reason end
  return fallback
end

local found = {}
if obj.status ~= nil and obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.status == "True" then found[c.type] = c end
  end
end

if found.Failed ~= nil then
  return { status = "Degraded", message = text(found.Failed, "TrainJob failed") }
end
if found.Complete ~= nil then
  return { status = "Healthy", message = text(found.Complete, "TrainJob completed") }
end
if found.Suspended ~= nil then
  return { status = "Suspended", message = text(found.Suspended, "TrainJob is suspended") }
end
if obj.spec ~= nil and obj.spec.suspend == true then
  return { status = "Suspended", message = "TrainJob is suspended (waiting to be admitted, e.g. by Kueue)" }
end

local active, succeeded, failed = 0, 0, 0
if obj.status ~= nil and obj.status.jobsStatus ~= nil then
  for _, j in ipairs(obj.status.jobsStatus) do
    active = active + (j.active or 0)
    succeeded = succeeded + (j.succeeded or 0)
    failed = failed + (j.failed or 0)
  end
  return { status = "Progressing", message = "TrainJob is running: " .. active .. " active, " ..
    succeeded .. " succeeded, " .. failed .. " failed jobs" }
end
return { status = "Progressing", message = "Waiting for the TrainJob to start" }
