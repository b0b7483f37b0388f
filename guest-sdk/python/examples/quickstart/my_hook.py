"""Triage for support requests: a request needs a ticket number, and an urgent one goes
to the on-call agent too."""

from colloquy_hook import Action, Event, Hook, export, log


class Triage(Hook):
    def on_message(self, event: Event) -> list[Action]:
        if event.message is None or event.message.performative != "request":
            return []
        ticket = event.content_str("ticket")
        if not ticket:
            return [Action.reject("a request needs a ticket number")]
        if event.content_bool("urgent"):
            on_call = event.config_str("on_call") or "on-call"
            log("info", f"ticket {ticket} is urgent: routed to {on_call} too")
            return [Action.route_to([on_call]), Action.set_var("priority", "high")]
        return [Action.set_var("priority", "normal")]


WitWorld = export(Triage)
