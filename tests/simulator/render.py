"""Simulator events as short readable lines: the format of tests/scenarios/*.expected."""


def render(event: dict) -> str:
    t = f"{event['t']:g}"
    if "refused" in event and "action" not in event:  # a submission the console refuses
        return f"{t} {event['job']}: submission refused | {event['refused']}"
    if "refused" in event:
        return f"{t} {event['job']}: {event['action']} refused | {event['refused']}"
    if "pod" in event:
        where = "in quota" if event["in_quota"] else "not in quota"
        line = (
            f"{t} {event['job']}[{event['pod']}]#{event['attempt']} {event['pod_status']} "
            f"on {event['node']} ({event['gpus']} GPUs, {event['charged_to']}, {where})"
        )
    elif "from" in event:
        line = f"{t} {event['job']}: {event['from']} -> {event['to']}"
        if "position" in event:
            line += f" #{event['position']}"
    elif "status" in event:  # a waiting job's reason or queue position changed
        line = f"{t} {event['job']}: {event['status']} #{event['position']}"
    else:
        return f"{t} {event['job']}: -> {event['to']}"
    return f"{line} | {event['reason']}" if event.get("reason") else line
