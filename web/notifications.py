"""The user's notification settings: e-mail on chosen events of their own jobs, and the
webhooks their workspaces send (set up by admins)."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from notifications.actions import set_email_option
from notifications.models import Channel, Event, NotificationRule


class EmailOptionForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="E-mail me about my jobs")
    events = forms.MultipleChoiceField(
        choices=Event.choices, required=False, widget=forms.CheckboxSelectMultiple
    )


@login_required
@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
    rule = NotificationRule.objects.filter(user=request.user, channel=Channel.EMAIL).first()
    if request.method == "POST":
        form = EmailOptionForm(request.POST)
        if form.is_valid():
            set_email_option(
                request.user,
                enabled=form.cleaned_data["enabled"],
                events=form.cleaned_data["events"],
            )
            messages.success(request, "Notification settings saved.")
            return redirect("notifications")
    else:
        initial = (
            {"enabled": rule.enabled, "events": rule.events}
            if rule
            else {"events": [Event.COMPLETED, Event.FAILED, Event.PREEMPTED]}
        )
        form = EmailOptionForm(initial=initial)
    webhooks = (
        NotificationRule.objects.filter(
            workspace__memberships__user=request.user, channel__in=[Channel.WEBHOOK, Channel.SLACK]
        )
        .select_related("workspace")
        .order_by("workspace__name", "name")
    )
    return render(
        request,
        "web/notifications/settings.html",
        {"form": form, "email": request.user.email, "webhooks": webhooks},
        status=400 if form.errors else 200,
    )
