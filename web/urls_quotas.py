"""The owner pages of the quota tree, workspaces and members, under /quotas/
(console.site_urls; docs/quota-tree.md "Owner pages")."""

from django.urls import path

from web import views_audit, views_members, views_quotas

urlpatterns = [
    path("tenant/<int:tenant_id>/", views_quotas.owner_tree, name="owner-tree"),
    path("tenant/<int:tenant_id>/audit/", views_audit.tenant_audit, name="owner-audit"),
    path("tenant/<int:tenant_id>/audit.csv", views_audit.tenant_audit_csv, name="owner-audit-csv"),
    path("tenant/<int:tenant_id>/new/", views_quotas.quota_new, name="owner-quota-new"),
    path("<int:pk>/edit/", views_quotas.quota_edit, name="owner-quota-edit"),
    path("<int:pk>/delete/", views_quotas.quota_delete, name="owner-quota-delete"),
    path(
        "tenant/<int:tenant_id>/workspaces/new/",
        views_members.workspace_new,
        name="owner-workspace-new",
    ),
    path("workspaces/<int:pk>/", views_members.workspace_detail, name="owner-workspace"),
    path("workspaces/<int:pk>/bind/", views_members.workspace_bind, name="owner-workspace-bind"),
    path("workspaces/<int:pk>/members/", views_members.member_add, name="owner-member-add"),
    path("members/<int:pk>/role/", views_members.member_role, name="owner-member-role"),
    path("members/<int:pk>/remove/", views_members.member_remove, name="owner-member-remove"),
]
