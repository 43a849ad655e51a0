// The practical ceiling of this stack: a minimal Fastify route that runs the
// single-row SELECT behind GetActiveVersion with mysql2 (a prepared
// statement, a pool) and answers it as JSON. The benchmark loads it exactly
// as it loads the service.
import Fastify from "fastify";
import mysql from "mysql2/promise";

const url = new URL(process.env["DATABASE_URL"]!);
const pool = mysql.createPool({
  host: url.hostname,
  port: Number(url.port || 3306),
  user: decodeURIComponent(url.username),
  password: decodeURIComponent(url.password),
  database: url.pathname.slice(1),
  connectionLimit: Number(process.env["DATABASE_POOL_MAX"] ?? 10),
  timezone: "Z",
});
const sql =
  "SELECT v.id, v.entity_id, v.version, v.source_hash, v.storage_path, v.file_size_bytes, v.package_lock_path, " +
  "v.service_dependencies, v.package_json, v.base_version_id, v.published_by, v.created_at " +
  "FROM entities e JOIN versions v ON v.id = e.active_version_id AND v.entity_id = e.id WHERE e.id = ?";

const app = Fastify({ logger: false });
app.get<{ Params: { id: string } }>("/baseline/:id/active-version", async (req, reply) => {
  const [rows] = await pool.execute(sql, [req.params.id]);
  const row = (rows as Array<Record<string, unknown>>)[0];
  if (row === undefined) return reply.code(404).send({ error: "not found" });
  return row;
});
const address = await app.listen({ host: "127.0.0.1", port: 0 });
process.stdout.write(`baseline listening on ${address}\n`);
process.on("SIGTERM", () => void app.close().then(() => pool.end()).then(() => process.exit(0)));
