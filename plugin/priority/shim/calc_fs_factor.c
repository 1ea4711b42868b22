/*
 * priority_p_calc_fs_factor takes `long double`s, which Rust cannot spell.
 * This C shim converts them and calls the Rust side (export.rs).
 */
extern double allot_calc_fs_factor(double usage_efctv, double shares_norm);

double priority_p_calc_fs_factor(long double usage_efctv, long double shares_norm)
{
	return allot_calc_fs_factor((double)usage_efctv, (double)shares_norm);
}
