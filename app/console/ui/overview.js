// The overview (#/): until the fleet view lands, the task list.
export function overviewView() { location.hash = "#/tasks"; return Promise.resolve(); }
