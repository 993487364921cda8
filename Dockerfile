# One image for web and worker (docker-compose.yml picks the command).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY requirements.lock .
RUN pip install --no-cache-dir -r requirements.lock
COPY . .
# collectstatic needs settings that load: a throwaway random key, only for this step.
RUN SECRET_KEY="$(python -c 'import secrets; print(secrets.token_urlsafe(50))')" \
    DEBUG=false python manage.py collectstatic --noinput
RUN useradd --create-home rcp && mkdir -p /app/var/media && chown -R rcp /app/var
USER rcp
EXPOSE 8000
CMD ["gunicorn", "rcp_platform.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
