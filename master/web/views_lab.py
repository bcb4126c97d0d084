"""The lab's users (admins) and experiment config templates (everyone), as Determined's web
UI has them."""

from __future__ import annotations

import yaml
from flask import render_template
from flask.typing import ResponseReturnValue

from master.errors import Forbidden
from master.services.experiment import templates as template_svc
from master.services.user import users as user_svc
from master.web.blueprint import bp
from master.web.session import current_user


@bp.get("/users")
def users() -> ResponseReturnValue:
    me = current_user()
    if me is None or not me.admin:
        raise Forbidden("only an admin may see the lab's users")
    return render_template("users.html", users=user_svc.all_users())


@bp.get("/templates")
def templates() -> ResponseReturnValue:
    rows = [
        {
            "name": t.name,
            "updated_at": t.updated_at,
            "yaml": yaml.safe_dump(t.config, sort_keys=False, default_flow_style=False),
        }
        for t in template_svc.list_templates()
    ]
    return render_template("templates.html", templates=rows)
