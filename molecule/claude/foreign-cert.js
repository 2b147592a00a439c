// Connect with TLS as Claude Code's runtime does (Node, NODE_EXTRA_CA_CERTS from the environment)
// to HOST:PORT, asking for the name SERVERNAME; print ACCEPTED (exit 0) or REFUSED <reason>
// (exit 3). Used by attacks.yml: the host CA's certificate for another site must be refused.
const tls = require("tls");
const [host, port, servername] = process.argv.slice(2);
const s = tls.connect(
  { host, port: Number(port), servername,
    checkServerIdentity: (h, cert) => tls.checkServerIdentity(servername, cert) },
  () => { console.log("ACCEPTED"); s.end(); process.exit(0); });
s.setTimeout(20000, () => { console.log("REFUSED timeout"); process.exit(3); });
s.on("error", (e) => { console.log("REFUSED " + e.message); process.exit(3); });
