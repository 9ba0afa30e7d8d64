# The workload image: servetwin with its dependencies (no engine inside; engines run in their own images).
FROM python:3.11-slim
RUN useradd --create-home --uid 1000 servetwin
WORKDIR /app
COPY pyproject.toml README.md ./
COPY foundation foundation
COPY servetwin servetwin
COPY scenarios scenarios
COPY simulator simulator
COPY live live
COPY serve serve
COPY analysis analysis
COPY calibrate calibrate
COPY paper_figures paper_figures
RUN pip install --no-cache-dir '.[ray]'
COPY scenarios/examples /scenarios
USER 1000
ENTRYPOINT ["servetwin"]
