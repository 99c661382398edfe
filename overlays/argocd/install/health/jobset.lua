-- Argo CD health of a JobSet (jobset.x-k8s.io/v1alpha2), installed as argocd-cm
-- `resource.customizations.health.jobset.x-k8s.io_JobSet`.
-- The controller's conditions: Failed and Completed are terminal (mirrored in
-- status.terminalState); Suspended while the JobSet waits (Kueue suspends queued JobSets).
-- Argo CD runs this in gopher-lua (Lua 5.1) with only the base and table libraries.
local function text(c, fallback)
  if c.message ~= nil and c.message ~= "" then return c.message end
  if c.reason ~= nil and c.reason ~= "" then return c.reason end
  return fallback
end

local found = {}
local terminal = nil
if obj.status ~= nil then
  terminal = obj.status.terminalState
  if obj.status.conditions ~= nil then
    for _, c in ipairs(obj.status.conditions) do
      if c.status == "True" then found[c.type] = c end
    end
  end
end

if found.Failed ~= nil then
  return { status = "Degraded", message = text(found.Failed, "JobSet failed") }
end
if terminal == "Failed" then
  return { status = "Degraded", message = "JobSet failed" }
end
if found.Completed ~= nil then
  return { status = "Healthy", message = text(found.Completed, "JobSet completed") }
end
if terminal == "Completed" then
  return { status = "Healthy", message = "JobSet completed" }
end
if found.Suspended ~= nil then
  return { status = "Suspended", message = text(found.Suspended, "JobSet is suspended") }
end
if obj.spec ~= nil and obj.spec.suspend == true then
  return { status = "Suspended", message = "JobSet is suspended (waiting to be admitted, e.g. by Kueue)" }
end
if found.RestartingJobSet ~= nil then
  return { status = "Progressing", message = text(found.RestartingJobSet, "JobSet is restarting") }
end

local restarts = 0
if obj.status ~= nil and obj.status.restarts ~= nil then restarts = obj.status.restarts end
if obj.status ~= nil and obj.status.replicatedJobsStatus ~= nil then
  local ready, active = 0, 0
  for _, r in ipairs(obj.status.replicatedJobsStatus) do
    ready = ready + (r.ready or 0)
    active = active + (r.active or 0)
  end
  return { status = "Progressing", message = "JobSet is running: " .. ready .. " ready, " .. active ..
    " active jobs, " .. restarts .. " restarts" }
end
return { status = "Progressing", message = "Waiting for the JobSet to start" }
